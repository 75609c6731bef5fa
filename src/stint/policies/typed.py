"""Any policy on a typed cluster: the type-blind policies' plans kept to one allowed type per job.

``TypeBlind(policy)`` runs ``policy`` unchanged and then repairs what its plan says about types
(on an untyped cluster, or for a type-aware policy such as ``gavel`` or ``sia``, the plan passes
through untouched; ``wrap`` decides). An allocation breaks the rules when its workers span
types, when its type is not one the job allows, or when it resizes a running job onto another
type (a resize stays on the job's type). Such an allocation is placed again, with the same
worker count, on the capacity the rest of the plan leaves:
- a running job: on its own type, keeping the nodes it holds where it can (fewer workers than
  asked if that many do not fit there, down to a count it can run on), else unchanged;
- a waiting job: on the allowed type with the most free GPUs that holds it (consolidated);
  if none does, it keeps waiting.
Allocations that keep the rules are left as the policy made them.
"""

from __future__ import annotations

from stint.model.allocation import EMPTY, Allocation, Plan, Wait, WaitCode
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.placement.packing import consolidated, drop_workers, give, in_order, take
from stint.placement.types import alloc_type, masked, type_order, type_problem
from stint.policies.base import ClusterView, JobStatus, Policy, PolicyBase


class TypeAware(PolicyBase):
    """Marks a policy that places on types itself (its plans are never repaired)."""


class TypeBlind(PolicyBase):
    """``inner`` with its plans kept to the type rules (see the module)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.tick_s = inner.tick_s
        self.lazy_progress = inner.lazy_progress

    def next_due(self) -> float | None:
        return self.inner.next_due()

    def plan(self, view: ClusterView) -> Plan:
        plan = self.inner.plan(view)
        if view.cluster.typed:
            repair(view, plan)
        return plan


def wrap(policy: Policy, cluster: Cluster) -> Policy:
    """``policy`` as it runs on ``cluster``: on a typed cluster, run per type by ``PerType`` if it
    says ``per_type``, else repaired by ``TypeBlind`` unless it is ``TypeAware``."""
    if not cluster.typed or isinstance(policy, TypeAware):
        return policy
    if getattr(policy, "per_type", False):  # singularity, oasis: one copy per type's host group
        from stint.policies.per_type import PerType

        return PerType(policy)
    return TypeBlind(policy)


def breaks_rules(cluster: Cluster, st: JobStatus, after: Allocation) -> bool:
    """True if ``after`` spans types, is of a type the job may not use, or resizes it onto
    another type than the one it holds."""
    if not after:
        return False
    if type_problem(cluster, st.spec, after):
        return True
    before = st.allocation
    return (bool(before) and after.num_workers != before.num_workers
            and alloc_type(cluster, after) != alloc_type(cluster, before))


def repair(view: ClusterView, plan: Plan) -> None:
    """Re-place, in ``plan``, the allocations that break the type rules (see the module)."""
    cluster = view.cluster
    by_id = view.by_id if view.by_id is not None else {st.job_id: st for st in view.jobs}
    bad = [jid for jid, a in plan.allocations.items() if breaks_rules(cluster, by_id[jid], a)]
    if not bad:
        return
    free = list(view.free_gpus)
    for jid, after in plan.allocations.items():  # the capacity the plan leaves
        st = by_id[jid]
        give(free, st.allocation, st.spec.gpus_per_worker)
        if jid not in bad:
            take(free, after, st.spec.gpus_per_worker)
    for jid in plan.reject:
        st = by_id[jid]
        give(free, st.allocation, st.spec.gpus_per_worker)
    down = view.down_nodes
    for i in down:
        free[i] = 0
    bad.sort(key=lambda j: (not by_id[j].allocation, by_id[j].spec.arrival_s, j))  # running jobs first
    for jid in bad:
        st = by_id[jid]
        want = plan.allocations[jid].num_workers
        got = _resize_in_type(cluster, st, want, free) if st.allocation else _start(cluster, st.spec, want, free)
        if got is None or got == st.allocation:
            del plan.allocations[jid]  # it keeps what it holds (or keeps waiting)
            take(free, st.allocation, st.spec.gpus_per_worker)
            if not st.allocation and view.explain:
                plan.waiting[jid] = Wait(WaitCode.CAPACITY, f"needs {want * st.spec.gpus_per_worker} GPUs "
                                         f"of one type it may run on ({', '.join(st.spec.gpu_types) or 'any'})")
        else:
            plan.allocations[jid] = Allocation(got.workers, plan.allocations[jid].ps)
            take(free, got, st.spec.gpus_per_worker)


def _start(cluster: Cluster, spec: JobSpec, workers: int, free: list[int]) -> Allocation | None:
    gpw = spec.gpus_per_worker
    for t in type_order(cluster, spec, free):
        got = consolidated(masked(free, cluster, t), workers, gpw)
        if got is not None:
            return Allocation.of(got)
    return None


def _resize_in_type(cluster: Cluster, st: JobStatus, workers: int, free: list[int]) -> Allocation | None:
    """``workers`` (or the most it can run on, fewer) on the job's own type, on the nodes it
    holds first; None if not even its current count fits there."""
    spec, have = st.spec, st.allocation
    gpw = spec.gpus_per_worker
    t = alloc_type(cluster, have)
    room = masked(free, cluster, t)
    give(room, have, gpw)
    for n in reversed(spec.feasible_counts()):
        if n > workers:
            continue
        if n <= have.num_workers:
            return Allocation.of(drop_workers(have, have.num_workers - n)) if n else EMPTY
        left = list(room)
        take(left, have, gpw)
        order = sorted((i for i in cluster.nodes_of(t) if left[i] >= gpw), key=lambda i: (-left[i], i))
        added = in_order(left, n - have.num_workers, gpw, [i for i, _ in have.workers] + order)
        if added is not None:
            counts = dict(have.workers)
            for i, k in added.items():
                counts[i] = counts.get(i, 0) + k
            return Allocation.of(counts)
    return None
