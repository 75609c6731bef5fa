"""Typed events for the engine's heap: ``(time_s, order, seq, kind, job_id, version)``.

``order`` fixes what happens first at equal times (completions free capacity before arrivals
ask for it); ``seq`` makes the heap order total and runs deterministic; ``version`` lets the
engine drop a job's stale completion/action events after its rate changed, instead of searching
the heap.
"""

from __future__ import annotations

from enum import IntEnum


class EventKind(IntEnum):
    COMPLETION = 0  # a job's work is done
    NODE_DOWN = 1  # a node fails: its jobs are preempted, its capacity disappears
    NODE_UP = 2  # the node is back
    ACTION_DONE = 3  # a start/resume/resize/migrate finished its delay: the job progresses again
    TICK = 4  # a slot boundary for policies with ``tick_s``
    RESERVE = 5  # a reservation slot takes a node (``stint.sim.reservation``): its jobs stop
    UNRESERVE = 6  # the slot gives its node back


Event = tuple[float, int, int, EventKind, str, int]
