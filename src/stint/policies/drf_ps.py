"""The paper's DRF baseline (OASiS §V) for parameter-server jobs on separate worker/PS hosts.

Every job is admitted. At each arrival and completion the worker counts of all active jobs are
recomputed from scratch by DRF progressive filling over dominant shares (one worker plus its
b_i/B_i share of a PS, against the worker-host and PS-host totals), up to N_i per job, with
tasks placed round-robin. Between events allocations stay as they are.
"""

from __future__ import annotations

from stint.model.allocation import Plan
from stint.placement.packing import trim_to_feasible
from stint.placement.round_robin import FreeCapacity
from stint.policies._ps_hosts import drf_fill
from stint.policies.base import ClusterView, PolicyBase
from stint.policies.registry import register


@register("drf-ps")
class DrfPS(PolicyBase):
    name = "drf-ps"
    tick_s: float | None = None

    def plan(self, view: ClusterView) -> Plan:
        plan = Plan()
        if not view.changed:
            return plan
        allocs = drf_fill([st.spec for st in view.jobs], FreeCapacity(view.cluster, down=view.down_nodes))
        for st in view.jobs:
            alloc = trim_to_feasible(st.spec, allocs[st.job_id])
            if alloc != st.allocation:
                plan.allocations[st.job_id] = alloc
        return plan
