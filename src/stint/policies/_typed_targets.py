"""From (type, worker count) per job to a plan: the placement step ``gavel`` and ``sia`` share.

A job whose target is the type and count it holds keeps its nodes; the others are placed, largest
first, consolidated on the free GPUs of their target type (every other type's nodes masked out)
once the kept jobs are charged; one that does not fit there (fragmentation) tries the smaller
counts it can run on, on that type (unless it is a running job moving to another type: a resize
keeps the type), and else waits. Jobs without a target are preempted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.model import PerfModel
from stint.placement.packing import consolidated, take
from stint.placement.types import alloc_type, masked, packed_on
from stint.policies.base import ClusterView, JobStatus

Target = tuple[str, int]  # (accelerator type, workers)


def capacity(view: ClusterView) -> list[int]:
    """Each node's GPUs, 0 for a node that is down: what a whole-cluster re-plan hands out."""
    return [0 if i in view.down_nodes else int(n.capacity.gpu) for i, n in enumerate(view.cluster.nodes)]


def type_gpus(cluster: Cluster, cap: Sequence[int]) -> dict[str, int]:
    return {t: sum(cap[i] for i in cluster.nodes_of(t)) for t in cluster.types}


def rate_on(perf: PerfModel, cluster: Cluster, spec: JobSpec, gpu_type: str, workers: int) -> float:
    """The job's rate alone on ``workers`` packed on ``gpu_type``; 0 where it may not run or that
    many do not fit."""
    if (cluster.typed and not spec.allows_type(gpu_type)) or not spec.can_run_on(workers):
        return 0.0
    alloc = packed_on(cluster, gpu_type, workers, spec.gpus_per_worker)
    return perf.rate(spec, alloc) if alloc else 0.0


def target_of(cluster: Cluster, st: JobStatus) -> Target | None:
    if not st.allocation:
        return None
    return alloc_type(cluster, st.allocation), st.allocation.num_workers


def place_targets(view: ClusterView, jobs: Sequence[JobStatus], targets: Mapping[str, Target]) -> Plan:
    """The plan that gives each of ``jobs`` its target (see the module)."""
    cluster = view.cluster
    free = capacity(view)
    final: dict[str, Allocation] = {}
    moving: list[JobStatus] = []
    for st in jobs:
        want = targets.get(st.job_id)
        if want is not None and want == target_of(cluster, st):
            final[st.job_id] = st.allocation
            take(free, st.allocation, st.spec.gpus_per_worker)
        elif want is not None:
            moving.append(st)
    moving.sort(key=lambda s: (-targets[s.job_id][1] * s.spec.gpus_per_worker, s.spec.arrival_s, s.job_id))
    for st in moving:
        t, n = targets[st.job_id]
        gpw = st.spec.gpus_per_worker
        room = masked(free, cluster, t)
        held = target_of(cluster, st)
        for count in reversed(st.spec.feasible_counts()):
            if count > n or (held is not None and held[0] != t and count != n):
                continue  # (a running job changes type only at its count: resizes keep the type)
            got = consolidated(room, count, gpw)
            if got is not None:
                final[st.job_id] = Allocation.of(got)
                take(free, final[st.job_id], gpw)
                break
    plan = Plan()
    for st in jobs:
        after = final.get(st.job_id, EMPTY)
        if after != st.allocation:
            plan.allocations[st.job_id] = after
    return plan
