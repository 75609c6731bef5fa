"""The preemption request: SIGUSR1 or SIGTERM sets a flag that the job reads at step boundaries.

Under the control plane (``STINT_CKPT_DIR`` set) the handlers are armed when ``stint.torch`` is
imported, so a request that arrives while the script is still building its model is not lost.
Once the training loop has ended (:func:`finished`) they stay armed: a request that lands then
(the job is done, only its epilogue runs) is noted, never fatal, so the process exits 0 once.
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
_state: dict[str, Any] = {"requested": False, "previous": {}, "note_at_exit": False}


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


def finished(speak: bool) -> None:
    """The training loop has ended: forget past requests and keep the handlers, so that a stop
    landing in the epilogue neither kills the process nor relaunches a finished job. ``speak``:
    at exit, say on stderr that one landed (the job's main worker: once per job)."""
    _state["requested"] = False
    if speak and not _state["note_at_exit"] and _state["previous"]:
        _state["note_at_exit"] = True
        atexit.register(_note_late_request)


def _note_late_request() -> None:
    if _state["requested"]:
        print("stint: stop requested after the training loop ended: the job finishes (exit 0)",
              file=sys.stderr, flush=True)
