"""Policies registered by name, so ``--policy fifo,drf`` and the control plane can build them.

Built-in policies are imported on demand: ``make("fifo")`` imports ``stint.policies.fifo`` only,
so a run that does not choose Optimus or Dorm never pays for SciPy's optimizer (about 1 s).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from stint.policies.base import Policy

if TYPE_CHECKING:
    from stint.model.sla import SlaTargets

PolicyFactory = Callable[..., Policy]

_REGISTRY: dict[str, PolicyFactory] = {}

# Name -> module under stint.policies that registers it. Keep sorted; a test checks it against
# what the modules register.
BUILTIN: dict[str, str] = {
    "dorm": "dorm",
    "drf": "drf",
    "drf-ps": "drf_ps",
    "fifo": "fifo",
    "fifo-fixed": "fifo_fixed",
    "gavel": "gavel",
    "oasis": "oasis",
    "oasis-replan": "oasis_replan",
    "optimus": "optimus",
    "pollux": "pollux",
    "rrh": "rrh",
    "sia": "sia",
    "singularity": "singularity",
    "sjf": "sjf",
    "srtf": "sjf",
    "tiresias": "tiresias",
}


class UnknownPolicyError(ValueError):
    pass


def register(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    """Class or function decorator: make ``name`` build this policy."""

    def deco(factory: PolicyFactory) -> PolicyFactory:
        if name in _REGISTRY:
            raise ValueError(f"policy {name!r} registered twice")
        _REGISTRY[name] = factory
        return factory

    return deco


def available() -> list[str]:
    """Every policy name: the built-in ones (not imported) and any registered since."""
    return sorted({*BUILTIN, *_REGISTRY})


def make(name: str, **params: Any) -> Policy:
    """Build the policy registered as ``name``; an unknown name lists the valid ones."""
    return _factory(name)(**params)


def _factory(name: str) -> PolicyFactory:
    if name not in _REGISTRY and name in BUILTIN:
        importlib.import_module(f"stint.policies.{BUILTIN[name]}")  # registers it
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; valid policies: {', '.join(available())}"
        ) from None


class PolicyOptionError(ValueError):
    """A ``--policy-opt KEY=VALUE`` the policy's factory does not take, or a value of the wrong
    type; the message names the key and the valid ones."""


def make_with_options(name: str, options: Sequence[str] = ()) -> Policy:
    """Build ``name`` from ``KEY=VALUE`` strings (``--policy-opt``, the same in ``sim`` and
    ``serve``), each converted to the type the factory's parameter declares. ``POLICY.KEY=VALUE``
    applies to that policy only (for ``stint sim --policy a,b``)."""
    params = _parameters(_factory(name))
    kwargs: dict[str, Any] = {}
    for text in options:
        key, sep, value = text.partition("=")
        key = key.strip().replace("-", "_")
        target, dot, rest = key.partition(".")
        if dot:
            if target.replace("_", "-") != name:
                continue
            key = rest
        if not sep or not key:
            raise PolicyOptionError(f"--policy-opt {text!r}: expected KEY=VALUE")
        if key not in params:
            valid = ", ".join(f"{k} ({t})" for k, t in params.items()) or "none"
            raise PolicyOptionError(f"policy {name!r} has no option {key!r}; valid: {valid}")
        kwargs[key] = _convert(name, key, params[key], value.strip())
    try:
        return make(name, **kwargs)
    except (TypeError, ValueError) as exc:
        raise PolicyOptionError(f"policy {name!r}: {exc}") from None


def options_of(name: str) -> dict[str, str]:
    """The options ``name`` takes from ``--policy-opt``, with their types."""
    return _parameters(_factory(name))


def tier_options(policies: tuple[str, ...], tiers: SlaTargets) -> tuple[str, ...]:
    """``POLICY.TIER=TARGET`` for each policy whose factory takes the tiers' targets."""
    from stint.model.job import Tier

    out: list[str] = []
    for name in policies:
        try:
            keys = options_of(name)
        except UnknownPolicyError:
            continue  # (building the policy names the unknown one)
        out += [f"{name}.{t.value}={tiers.of(t)}".replace("=None", "=none")
                for t in Tier if t.value in keys]
    return tuple(out)


def merged_options(from_file: tuple[str, ...], from_flags: tuple[str, ...]) -> tuple[str, ...]:
    """File options, then flag options; a key given twice keeps the flag's value."""
    flagged = {o.partition("=")[0].strip() for o in from_flags}
    return tuple(o for o in from_file if o.partition("=")[0] not in flagged) + from_flags


_SCALARS: dict[str, Callable[[str], Any]] = {"float": float, "int": int, "str": str}


def _parameters(factory: PolicyFactory) -> dict[str, str]:
    """Options settable from text: parameters annotated with a scalar, a bool, an optional
    scalar or a tuple of floats (objects such as ``bounds`` or ``history`` are code-only)."""
    out: dict[str, str] = {}
    params = list(inspect.signature(factory).parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params) and isinstance(factory, type):
        for base_cls in factory.__mro__[1:]:  # a subclass passing **kw on to its base
            if "__init__" in vars(base_cls):
                params += inspect.signature(vars(base_cls)["__init__"]).parameters.values()
    for p in params:
        ann = str(p.annotation).replace(" ", "")
        base = ann.removesuffix("|None")
        if p.name not in out and (base in _SCALARS or base == "bool" or base == "tuple[float,...]"):
            out[p.name] = ann
    return out


def _convert(name: str, key: str, ann: str, value: str) -> Any:
    base = ann.removesuffix("|None")
    try:
        if base != ann and value.lower() == "none":
            return None
        if base == "bool":
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if base == "tuple[float,...]":
            return tuple(float(v) for v in value.split(",") if v.strip())
        return _SCALARS[base](value)
    except ValueError:
        raise PolicyOptionError(f"policy {name!r} option {key!r}: {value!r} is not a {ann} "
                                "(tuples: comma-separated)") from None
