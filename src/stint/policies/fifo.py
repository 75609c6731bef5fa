"""FIFO: first come, first served, non-preemptive, with head-of-line blocking.

Jobs start in arrival order at their requested size; when the oldest waiting job does not fit,
nothing behind it starts (no backfilling), as in a plain batch queue. Cost per pass:
O(changed jobs + jobs started), so a pass over 10,000 queued jobs is as cheap as over ten.
"""

from __future__ import annotations

from stint.model.allocation import Plan
from stint.policies._index import OrderIndex, fill
from stint.policies.base import ClusterView, JobStatus, PolicyBase
from stint.policies.registry import register


def _arrival(st: JobStatus, now: float) -> tuple[float, str]:
    return (st.spec.arrival_s, st.job_id)


@register("fifo")
class Fifo(PolicyBase):
    """First in, first out; ``placement`` is "consolidated" or "spread"."""

    tick_s: float | None = None
    lazy_progress = True  # reads progress only through *_at(now)

    def __init__(self, placement: str = "consolidated") -> None:
        self.name = "fifo"
        self.placement = placement
        self._index = OrderIndex(_arrival)

    def plan(self, view: ClusterView) -> Plan:
        self._index.sync(view)
        return fill(view, self._index, max_skip=0, strategy=self.placement, policy="fifo")
