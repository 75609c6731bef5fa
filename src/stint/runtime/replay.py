"""Replay submissions through the real ``Controller`` on a simulated clock.

With ``executor.clocked.ClockedExecutor`` the controller, its store and its policy run exactly as
under ``stint serve``, but time jumps from one instant something can happen to the next: a
submission, an attempt's end or stop, a node failure or recovery, the policy's next tick. At each
instant the controller is stepped until it is quiet. Used by the parity test (simulated vs live
enactment) and the forecast accuracy benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from sqlalchemy import func, select

from stint.runtime.controller import Controller, StepReport
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.states import TERMINAL
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.tables import Job

_TERMINAL = [str(s) for s in TERMINAL]


def replay(ctl: Controller, ex: ClockedExecutor, caller: Caller,
           submissions: Sequence[tuple[float, NewJob]],
           observe: Callable[[float, StepReport], None] | None = None,
           max_instants: int = 100_000) -> float:
    """Submit each ``(time, job)`` as ``caller`` at its time and run until nothing is active;
    ``observe(now, report)`` sees every step. Returns the last instant."""
    store = ctl.store
    pending = sorted(submissions, key=lambda s: s[0])
    t = 0.0
    for _ in range(max_instants):
        nxt = min(pending[0][0] if pending else math.inf, ex.next_event(),
                  next_tick(ctl, t) if _active(store) else math.inf)
        if nxt == math.inf:
            break
        t = ex.now = nxt
        while pending and pending[0][0] <= t:
            store.add_job(pending.pop(0)[1], caller, t)
        for _ in range(20):  # step at this instant until nothing more happens
            report = ctl.step(t)
            if observe is not None:
                observe(t, report)
            if report.skipped:
                break
    return t


def next_tick(ctl: Controller, t: float) -> float:
    """The policy's next tick after ``t`` on the store's clock (the simulator's rule)."""
    tick, due = ctl.policy.tick_s, ctl.policy.next_due()
    if not tick or due is None:
        return math.inf
    return max((math.floor(t / tick + 1e-9) + 1) * tick, math.ceil(due / tick - 1e-9) * tick)


def _active(store: Store) -> bool:
    with store.read() as r:
        return bool(r.scalar(select(func.count()).select_from(Job).where(
            Job.state.not_in(_TERMINAL))))
