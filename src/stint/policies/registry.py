"""Policies registered by name, so ``--policy fifo,drf`` and the control plane can build them.

Built-in policies are imported on demand: ``make("fifo")`` imports ``stint.policies.fifo`` only,
so a run that does not choose Optimus or Dorm never pays for SciPy's optimizer (about 1 s).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from stint.policies.base import Policy

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
    "oasis": "oasis",
    "oasis-replan": "oasis_replan",
    "optimus": "optimus",
    "pollux": "pollux",
    "rrh": "rrh",
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
    if name not in _REGISTRY and name in BUILTIN:
        importlib.import_module(f"stint.policies.{BUILTIN[name]}")  # registers it
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; valid policies: {', '.join(available())}"
        ) from None
    return factory(**params)
