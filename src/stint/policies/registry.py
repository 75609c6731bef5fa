"""Policies registered by name, so ``--policy fifo,drf`` and the control plane can build them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stint.policies.base import Policy

PolicyFactory = Callable[..., Policy]

_REGISTRY: dict[str, PolicyFactory] = {}


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
    _load_builtin()
    return sorted(_REGISTRY)


def make(name: str, **params: Any) -> Policy:
    """Build the policy registered as ``name``; an unknown name lists the valid ones."""
    _load_builtin()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; valid policies: {', '.join(available())}"
        ) from None
    return factory(**params)


def _load_builtin() -> None:
    # Importing stint.policies imports every policy module, each of which registers itself.
    import stint.policies  # noqa: F401
