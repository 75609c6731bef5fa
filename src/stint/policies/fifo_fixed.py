"""The paper's FIFO baseline (OASiS §V): arrival order, fixed worker/PS counts, round-robin.

Jobs start strictly in arrival order, each with its fixed ``requested_workers`` workers and the
``ceil(y b/B)`` PSs that (6) needs, and keep them until they finish (no preemption). The head of
the queue blocks the rest until it fits. A job that would not fit even on the empty cluster is
rejected rather than blocking forever.
"""

from __future__ import annotations

from stint.model.allocation import Plan
from stint.placement.round_robin import FreeCapacity, fits_empty
from stint.policies.base import ClusterView, PolicyBase
from stint.policies.registry import register


@register("fifo-fixed")
class FifoFixed(PolicyBase):
    name = "fifo-fixed"
    tick_s: float | None = None

    def plan(self, view: ClusterView) -> Plan:
        free = FreeCapacity(view.cluster, view.jobs, view.down_nodes)
        plan = Plan()
        for st in view.jobs:
            if st.allocation:  # waiting: queued, or paused (a node it ran on failed)
                continue
            alloc = free.place(st.spec, st.spec.requested_workers)
            if alloc is None:
                if not fits_empty(view.cluster, st.spec, st.spec.requested_workers):
                    plan.reject[st.job_id] = "fifo-fixed: the fixed allocation never fits"
                    continue
                break  # strict FIFO: the head of the queue waits, and so does everyone behind it
            plan.allocations[st.job_id] = alloc
        return plan
