"""What happened over time, from the transitions the store keeps (the dashboard's timeline).

A transition to ``starting`` records the allocation its attempt holds (``Transition.allocation``);
the attempt holds it until the job's next transition out of the holding states. From these:

- ``segments``: each attempt's allocation, from its start to its end (None: still holding), and
  the state it ended in;
- ``marks``: the preemptions, resizes, migrations and failures, each at the instant the job
  stopped for it (a stop followed by ``resizing`` or ``migrating`` is that; a job that went to
  ``preempted`` or ``failed`` straight from ``starting`` or ``running``, without the checkpoint a
  requested stop takes, or to ``failed`` from any holding state, failed: a worker died, hung or
  overran its time; any other stop is a preemption);
- ``utilization``: GPUs held over time, a step series over every job;
- ``waiting``: jobs waiting (submitted or preempted, not yet holding, not finished) over time;
- ``sla_met``: per tier, the share of its finished jobs that met the tier's target, over time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from stint.model.allocation import Allocation
from stint.runtime.states import HOLDING, TERMINAL, JobState
from stint.runtime.store import load_alloc

_HOLDING = frozenset(str(s) for s in HOLDING)
_TERMINAL = frozenset(str(s) for s in TERMINAL)
_MOVES = {str(JobState.RESIZING): "resize", str(JobState.MIGRATING): "migrate"}
_UNASKED = frozenset({str(JobState.STARTING), str(JobState.RUNNING)})  # no stop was requested


@dataclass(frozen=True, slots=True)
class Step:
    """One row of ``transitions``, as history reads it."""

    job_id: int
    src: str
    dst: str
    at: float
    attempt: int
    reason: str
    allocation: str | None


@dataclass(frozen=True, slots=True)
class Segment:
    job_id: int
    attempt: int
    start: float
    end: float | None  # None: it still holds the allocation
    allocation: Allocation
    ended: str  # the state it went to ("" while it holds)


@dataclass(frozen=True, slots=True)
class Mark:
    job_id: int
    at: float
    kind: str  # "preempt", "resize", "migrate" or "fail"
    reason: str


@dataclass(frozen=True, slots=True)
class JobTimes:
    job_id: int
    submitted_at: float
    finished_at: float | None


def segments(steps: Sequence[Step]) -> list[Segment]:
    """Every attempt's hold (``steps`` in the order they were written)."""
    out: list[Segment] = []
    open_: dict[int, Step] = {}
    for s in steps:
        began = open_.get(s.job_id)
        if began is not None and s.dst not in _HOLDING:
            out.append(Segment(s.job_id, began.attempt, began.at, s.at,
                               load_alloc(began.allocation), s.dst))
            del open_[s.job_id]
        if s.dst == JobState.STARTING:
            open_[s.job_id] = s
    out += [Segment(s.job_id, s.attempt, s.at, None, load_alloc(s.allocation), "")
            for s in open_.values()]
    return sorted(out, key=lambda g: (g.start, g.job_id))


def marks(steps: Sequence[Step]) -> list[Mark]:
    """Preemptions, resizes, migrations and failures (see the module docstring)."""
    out: list[Mark] = []
    stopped: dict[int, Step] = {}  # job -> its stop not yet told apart
    for s in steps:
        stop = stopped.pop(s.job_id, None)
        if stop is not None:
            out.append(Mark(s.job_id, stop.at, _MOVES.get(s.dst, "preempt"), stop.reason))
        failed = s.dst == JobState.FAILED and s.src in _HOLDING
        if failed or (s.dst == JobState.PREEMPTED and s.src in _UNASKED):
            out.append(Mark(s.job_id, s.at, "fail", s.reason))
        elif s.dst == JobState.PREEMPTED:
            stopped[s.job_id] = s
    out += [Mark(s.job_id, s.at, "preempt", s.reason) for s in stopped.values()]
    return sorted(out, key=lambda m: (m.at, m.job_id))


def utilization(holds: Iterable[Segment], now: float) -> list[tuple[float, int]]:
    """GPUs held over time: ``(time, GPUs from then on)`` at every change."""
    deltas: list[tuple[float, int]] = []
    for g in holds:
        deltas += [(g.start, g.allocation.num_workers),
                   (now if g.end is None else g.end, -g.allocation.num_workers)]
    return _steps(deltas)


def waiting(jobs: Sequence[JobTimes], steps: Sequence[Step]) -> list[tuple[float, int]]:
    """Jobs waiting over time: from submission, or a stop, to the next start or the end."""
    waits = {j.job_id: True for j in jobs}
    deltas = [(j.submitted_at, 1) for j in jobs]
    for s in steps:
        was = waits.get(s.job_id)
        if was is None:
            continue
        now_waits = s.dst not in _HOLDING and s.dst not in _TERMINAL
        if now_waits != was:
            deltas.append((s.at, 1 if now_waits else -1))
            waits[s.job_id] = now_waits
    return _steps(deltas)


def sla_met(finished: Iterable[tuple[float, str, bool]]) -> dict[str, list[tuple[float, float]]]:
    """Per tier, from ``(finished at, tier, met its target)`` of each finished job: the share of
    the tier's jobs finished so far that met it, at each finish."""
    out: dict[str, list[tuple[float, float]]] = {}
    counts: dict[str, list[int]] = {}
    for at, tier, met in sorted(finished):
        n = counts.setdefault(tier, [0, 0])
        n[0] += met
        n[1] += 1
        series = out.setdefault(tier, [])
        if series and series[-1][0] == at:
            series.pop()
        series.append((at, n[0] / n[1]))
    return out


def _steps(deltas: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The running sum of ``(time, change)``, one point per time at which the level changes."""
    out: list[tuple[float, int]] = []
    level = 0
    for t, d in sorted(deltas):
        level += d
        if out and out[-1][0] == t:
            out.pop()
        if not out or out[-1][1] != level:
            out.append((t, level))
    return out
