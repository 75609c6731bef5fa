"""The preemption request: SIGUSR1 or SIGTERM sets a flag that the job reads at step boundaries.

Under the control plane (``STINT_CKPT_DIR`` set) the handlers are armed when ``stint.torch`` is
imported, so a request that arrives while the script is still building its model is not lost.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
_state: dict[str, Any] = {"requested": False, "previous": {}}


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _state["requested"] = True


def arm() -> None:
    """Install the handlers (idempotent); only possible on the main thread."""
    if _state["previous"]:
        return
    if threading.current_thread() is not threading.main_thread():
        print("stint: not on the main thread; SIGUSR1/SIGTERM will not stop the job", file=sys.stderr)
        return
    _state["previous"] = {s: signal.signal(s, _on_signal) for s in SIGNALS}


def disarm() -> None:
    """Put the previous handlers back."""
    for s, handler in _state["previous"].items():
        signal.signal(s, handler)
    _state["previous"] = {}


def requested() -> bool:
    """Whether a stop was requested by signal (or by :func:`request`)."""
    return bool(_state["requested"])


def request() -> None:
    _state["requested"] = True


def reset() -> None:
    """Forget a past request (a new Job in the same process starts clean)."""
    _state["requested"] = False
