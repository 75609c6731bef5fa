"""A policy run once per accelerator type: each type's nodes are a host group of their own.

``PerType(policy)`` on a typed cluster gives every type a copy of ``policy`` that sees only that
type's nodes (renumbered from 0) and the jobs assigned to it, so each copy keeps its own state:
``singularity``'s tiers and SLA accounting, ``oasis``'s admission prices and committed schedules
are per type. A job is assigned to one type when first seen and stays there until it ends (a
running job keeps its type; its resizes are that copy's, on that type's nodes):
- a job that already holds GPUs: their type;
- else, of the types it allows whose GPUs hold its smallest size, the one with the least
  expected load per unit of its speed there: (GPUs requested by the jobs assigned to it plus
  this job's) / (its GPUs x the job's rate there over its best rate); ties by cluster order.
  A job no allowed type can hold goes to its allowed type with the most GPUs, whose copy
  rejects or keeps it waiting as it would on a cluster that small.
Plans are mapped back to the cluster's node indices and merged. The per-type views carry no
``by_id`` (incremental policies rebuild their index every pass).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace

from stint.model.allocation import Allocation, Plan
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.model import PerfModel
from stint.policies._typed_targets import rate_on
from stint.policies.base import ClusterView, JobStatus, Policy, PolicyBase


def _map(alloc: Allocation, index: Callable[[int], int]) -> Allocation:
    return Allocation(tuple((index(n), c) for n, c in alloc.workers),
                      tuple((index(n), c) for n, c in alloc.ps))


@dataclass(frozen=True)
class _Group:
    """One type's nodes: ``index[k]`` is the cluster index of the group's node k."""

    gpu_type: str
    index: tuple[int, ...]
    local: dict[int, int]  # cluster index -> group index
    cluster: Cluster
    gpus: int

    @staticmethod
    def of(cluster: Cluster, gpu_type: str) -> _Group:
        index = cluster.nodes_of(gpu_type)
        return _Group(gpu_type, index, {g: k for k, g in enumerate(index)},
                      Cluster(tuple(cluster.nodes[i] for i in index)),
                      sum(int(cluster.nodes[i].capacity.gpu) for i in index))

    def to_local(self, alloc: Allocation) -> Allocation:
        return _map(alloc, self.local.__getitem__)

    def to_global(self, alloc: Allocation) -> Allocation:
        return _map(alloc, self.index.__getitem__)


class _GroupPerf:
    """The performance model on a group's renumbered nodes (rates on the cluster's nodes)."""

    def __init__(self, perf: PerfModel, group: _Group) -> None:
        self.perf, self.group = perf, group

    def rate(self, spec: JobSpec, allocation: Allocation) -> float:
        return self.perf.rate(spec, self.group.to_global(allocation))


class PerType(PolicyBase):
    """``inner`` once per accelerator type (see the module)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.tick_s = inner.tick_s
        self.lazy_progress = inner.lazy_progress
        self._copies: dict[str, Policy] = {}
        self._groups: dict[str, _Group] = {}
        self._home: dict[str, str] = {}  # job id -> its type
        self._cluster: Cluster | None = None

    def next_due(self) -> float | None:
        due = [d for d in (p.next_due() for p in self._copies.values()) if d is not None]
        return min(due) if due else (None if self._copies else self.inner.next_due())

    def plan(self, view: ClusterView) -> Plan:
        if view.cluster is not self._cluster:
            self._cluster = view.cluster
            self._groups = {t: _Group.of(view.cluster, t) for t in view.cluster.types}
            for t in view.cluster.types:
                self._copies.setdefault(t, copy.deepcopy(self.inner))
        by_type: dict[str, list[JobStatus]] = {t: [] for t in self._groups}
        for st in view.jobs:
            by_type[self._assign(view, st, by_type)].append(st)
        live = {st.job_id for st in view.jobs}
        self._home = {j: t for j, t in self._home.items() if j in live}
        out = Plan()
        for t, jobs in by_type.items():
            self._merge(out, self._groups[t], self._copies[t].plan(self._view(view, self._groups[t], jobs)))
        return out

    def _assign(self, view: ClusterView, st: JobStatus, by_type: dict[str, list[JobStatus]]) -> str:
        home = self._home.get(st.job_id)
        if home is None:
            home = self._home[st.job_id] = self._choose(view, st, by_type)
        return home

    def _choose(self, view: ClusterView, st: JobStatus, by_type: dict[str, list[JobStatus]]) -> str:
        cluster, spec = view.cluster, st.spec
        if st.allocation:
            return cluster.nodes[st.allocation.workers[0][0]].gpu_type
        allowed = [t for t in cluster.types if spec.allows_type(t)] or list(cluster.types)
        gpw = spec.gpus_per_worker
        fits = [t for t in allowed if self._groups[t].gpus >= spec.min_workers * gpw]
        if not fits:
            return max(allowed, key=lambda t: self._groups[t].gpus)
        rates = {t: rate_on(view.perf, cluster, spec, t, min(spec.requested_workers, self._groups[t].gpus // gpw))
                 for t in fits}
        best = max(rates.values())

        def load(t: str) -> float:
            asked = sum(s.spec.requested_workers * s.spec.gpus_per_worker for s in by_type[t])
            speed = rates[t] / best if best > 0 else 1.0
            return (asked + spec.requested_workers * gpw) / (self._groups[t].gpus * max(speed, 1e-9))

        return min(fits, key=load)

    @staticmethod
    def _view(view: ClusterView, group: _Group, jobs: list[JobStatus]) -> ClusterView:
        mine = [replace(st, allocation=group.to_local(st.allocation)) if st.allocation else st for st in jobs]
        ids = {st.job_id for st in jobs}
        free_res = None if view.free_resources is None else [view.free_resources[i] for i in group.index]
        return ClusterView(
            now=view.now, cluster=group.cluster, jobs=mine, free_gpus=[view.free_gpus[i] for i in group.index],
            perf=_GroupPerf(view.perf, group), changed=[j for j in view.changed if j in ids],
            free_resources=free_res, history=view.history,
            down_nodes=frozenset(group.local[i] for i in view.down_nodes if i in group.local),
            explain=view.explain)

    @staticmethod
    def _merge(out: Plan, group: _Group, plan: Plan) -> None:
        for jid, alloc in plan.allocations.items():
            out.allocations[jid] = group.to_global(alloc)
        out.reject.update(plan.reject)
        out.explain.update({j: f"{text} (on {group.gpu_type})" for j, text in plan.explain.items()})
        out.waiting.update(plan.waiting)
