"""Exactness guarded: what would make replicas or a resumed run silently diverge is detected here.

- :func:`settings` are the process settings that change floating-point bits; the job records them
  in every checkpoint and warns on resume (and at start, across workers) when they differ.
- :func:`checksums` are exact, order-independent per-tensor fingerprints (integer sums of the raw
  bits): workers compare them every N steps and at every checkpoint.
- The optimizer-step hooks (``torch.optim`` global hooks) let the job check every ``step()`` of
  every optimizer: one not passed to ``init()``, one updating a parameter of no tracked module,
  an untracked LR scheduler, or a step on gradients that were not reduced over the logical ranks.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)


class DivergenceError(RuntimeError):
    """A condition that would make the job's results depend on P, on a resume, or on the worker."""


def settings() -> dict[str, Any]:
    """The process settings that change the bits of a result (recorded in every checkpoint)."""
    return {
        "torch version": torch.__version__,
        "torch threads": torch.get_num_threads(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "default dtype": str(torch.get_default_dtype()),
        "cudnn deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn benchmark": bool(torch.backends.cudnn.benchmark),
        "cuda matmul tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn tf32": bool(torch.backends.cudnn.allow_tf32),
    }


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``"name: before -> now"`` for every setting that differs (missing ones included)."""
    names = sorted(set(before) | set(now))
    return [f"{n}: {before.get(n)!r} -> {now.get(n)!r}" for n in names if before.get(n) != now.get(n)]


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def checksums(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One int64 per tensor: the sum of its elements' raw bits (exact; any bit flip changes it)."""
    if not tensors:
        return torch.zeros(0, dtype=torch.int64)
    sums = []
    for t in tensors:
        flat = t.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        bits = flat.view(_INT_OF_SIZE[flat.element_size()])
        sums.append(bits.sum(dtype=torch.int64))
    return torch.stack(sums)


class StepObserver(Protocol):
    """What the optimizer hooks call: the job that is running in this process."""

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...
    def after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...


_observer: list[weakref.ref[StepObserver]] = []
_installed: list[bool] = []


def _pre(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    observer = _observer[0]() if _observer else None
    if observer is not None:
        observer.before_optimizer_step(optimizer)


def _post(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    observer = _observer[0]() if _observer else None
    if observer is not None:
        observer.after_optimizer_step(optimizer)


def observe(observer: StepObserver | None) -> None:
    """Make ``observer`` the one job watched by the optimizer hooks (None: watch nothing)."""
    if not _installed:
        register_optimizer_step_pre_hook(_pre)
        register_optimizer_step_post_hook(_post)
        _installed.append(True)
    _observer[:] = [weakref.ref(observer)] if observer is not None else []
