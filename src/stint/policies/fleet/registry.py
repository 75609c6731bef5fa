"""Global schedulers by name (``stint sim --global NAME``, options as ``--global-opt KEY=VALUE``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields

from stint.policies.fleet.base import GlobalPolicy
from stint.policies.fleet.baselines import LeastLoaded, Static
from stint.policies.fleet.gain import Gain

GLOBAL: dict[str, Callable[..., GlobalPolicy]] = {"gain": Gain, "least-loaded": LeastLoaded, "static": Static}


def make_global(name: str, options: Sequence[str] = ()) -> GlobalPolicy:
    """Build a global scheduler; an unknown name or option raises ValueError naming the valid ones."""
    if name not in GLOBAL:
        raise ValueError(f"unknown global scheduler {name!r}; valid: {', '.join(sorted(GLOBAL))}")
    factory = GLOBAL[name]
    types = {f.name: f.type for f in fields(factory) if f.name != "name"}  # type: ignore[arg-type]
    kwargs: dict[str, object] = {}
    for opt in options:
        key, eq, text = (s.strip() for s in opt.partition("="))
        if not eq or key not in types:
            raise ValueError(f"global scheduler {name!r}: bad option {opt!r}; keys: {', '.join(sorted(types))}")
        try:
            kwargs[key] = (int(text) if types[key] in ("int", int) else
                           None if text.lower() == "none" else float(text))
        except ValueError:
            raise ValueError(f"global scheduler {name!r}: option {key} needs a number (got {text!r})") from None
    return factory(**kwargs)
