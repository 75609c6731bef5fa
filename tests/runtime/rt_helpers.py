"""Helpers shared by the control-plane tests (a module of its own: conftest is not importable)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

COUNTER = str(Path(__file__).with_name("counter_job.py"))


def counter_cmd(steps: int, out: Path, *extra: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    return [sys.executable, COUNTER, str(steps), str(out), *extra]


def wait_for(cond: Callable[[], object], timeout: float = 30.0, what: str = "condition",
             tick: Callable[[], object] | None = None) -> object:
    """Poll ``cond`` (calling ``tick`` between polls) until it is truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
