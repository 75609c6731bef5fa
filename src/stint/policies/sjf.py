"""Shortest job first (SJF, non-preemptive) and shortest remaining time first (SRTF, preemptive).

Both order by the length the policy may know (``JobStatus.known_remaining_at``,
``policies/knowledge.py``): the declared or learned estimate by default; with ``--knowledge
oracle``, the run time the trace recorded, the upper-bound baselines of the Tiresias and Pollux
papers. Lengths are in the job's work units (for Philly traces, seconds at the requested size).

SRTF preempts a running job when a waiting job's remaining time is strictly shorter than the
running job's; ties never preempt (that would thrash). Both backfill: a job that does not fit is
skipped, for at most ``max_skip`` jobs per pass.
"""

from __future__ import annotations

from collections.abc import Callable

from stint.model.allocation import Plan
from stint.policies._index import OrderIndex, fill
from stint.policies.base import ClusterView, JobStatus, Phase, PolicyBase
from stint.policies.registry import register

Key3 = tuple[float, float, str]


def remaining_s(st: JobStatus, now: float) -> float:
    """Known remaining work (for Philly traces: seconds at the requested size)."""
    return st.known_remaining_at(now)


def _sjf_key(st: JobStatus, now: float) -> tuple[float, float, str]:
    return (remaining_s(st, now), st.spec.arrival_s, st.job_id)


def _srtf_key(st: JobStatus, now: float) -> tuple[float, float, str]:
    # Waiting jobs: remaining time (constant while they wait). Running jobs: projected finish
    # time now + remaining, which stays constant while they run, so keys need no refresh; the
    # comparison below turns it back into a remaining time.
    rem = remaining_s(st, now)
    return ((now + rem) if st.phase is Phase.RUNNING else rem, st.spec.arrival_s, st.job_id)


@register("sjf")
class Sjf(PolicyBase):
    """Non-preemptive shortest-job-first by known length."""

    tick_s: float | None = None
    name = "sjf"
    lazy_progress = True  # reads progress only through *_at(now)

    def __init__(self, placement: str = "consolidated", max_skip: int = 64) -> None:
        self.placement = placement
        self.max_skip = max_skip
        self._index = OrderIndex(self._key)

    @staticmethod
    def _key(st: JobStatus, now: float) -> tuple[float, float, str]:
        return _sjf_key(st, now)

    def _preempts(self, now: float) -> Callable[[Key3, Key3], bool] | None:
        return None

    def plan(self, view: ClusterView) -> Plan:
        self._index.sync(view)
        return fill(
            view, self._index, preempts=self._preempts(view.now), max_skip=self.max_skip,
            strategy=self.placement, policy=self.name,
        )


@register("srtf")
class Srtf(Sjf):
    """Preemptive shortest-remaining-time-first by known remaining length."""

    name = "srtf"

    @staticmethod
    def _key(st: JobStatus, now: float) -> tuple[float, float, str]:
        return _srtf_key(st, now)

    def _preempts(self, now: float) -> Callable[[Key3, Key3], bool] | None:
        def shorter(waiting: Key3, running: Key3) -> bool:
            return waiting[0] < running[0] - now  # running keys hold projected finish times

        return shorter
