"""The capacity ledger: free resources per node, and the one fit check every mechanism uses.

A ``Ledger`` holds, for each node of a cluster, its free GPU, CPU, memory and bandwidth (the
order of ``RESOURCE_NAMES``) and whether the node is down. ``take`` and ``give`` charge or return
a job's ``Allocation`` (its workers' and parameter servers' demand); ``shortfall`` says, without
changing anything, why an allocation would not fit. The simulator, the live controller and the
slot evaluator of the OASiS figures all keep their capacity here, and policies read it through
``ClusterView.free_gpus`` / ``free_resources`` (the ledger's own lists, read-only to them) and
``free_index`` (``by_free``: nodes bucketed by free GPUs, updated with every change, so that
placement costs do not grow with the number of nodes).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from stint.model.allocation import Allocation
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.model.resources import RESOURCE_NAMES
from stint.placement.free_index import FreeIndex
from stint.placement.types import type_problem

_EPS = 1e-9


class RefusalCode(StrEnum):
    """Why the mechanism did not carry out an allocation: a small fixed vocabulary."""

    CAPACITY = "capacity"  # a node is short of one resource (``Refusal.resource``, ``short_by``)
    NODE_DOWN = "node down"  # a node the allocation names is down or does not exist
    INVALID_SIZE = "invalid size"  # the job cannot run on that many workers
    TYPE = "type"  # its nodes mix accelerator types, or are of a type the job may not run on
    PINNED = "pinned"  # an operator pinned the job where it is
    FINISHING = "finishing"  # the job is at its last step: it ends by itself
    DISPLACED = "displaced"  # another refusal in the same plan left no room for it
    UNKNOWN = "unknown"  # the plan named a job the policy was not shown


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an allocation was not carried out: the job, the ``code``, and for people ``detail``.

    ``node`` is the node concerned (-1 when none is: invalid size, pinned, displaced, unknown;
    for TYPE the first worker node); ``resource`` (one of ``RESOURCE_NAMES``) and ``short_by``
    say, for CAPACITY only, which resource fell short and by how much.
    """

    job_id: str
    code: RefusalCode
    detail: str
    node: int = -1
    resource: str = ""
    short_by: float = 0.0

    def __str__(self) -> str:
        if self.code is RefusalCode.CAPACITY:
            return (f"job {self.job_id}: node {self.node} short of {self.resource} by "
                    f"{self.short_by:g} ({self.detail})")
        if self.code is RefusalCode.NODE_DOWN:
            return f"job {self.job_id}: node {self.node} {self.detail}"
        return f"job {self.job_id}: {self.code}: {self.detail}"


class Ledger:
    """Free resources per node of ``cluster`` (all free at first) and the set of nodes down."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.capacity = [list(n.capacity.as_tuple()) for n in cluster.nodes]
        self.free = [list(c) for c in self.capacity]
        self.free_gpus = [int(c[0]) for c in self.capacity]
        # Nodes bucketed by free GPUs, kept with ``free_gpus`` (placement without a scan).
        self.by_free = FreeIndex(self.free_gpus, max(self.free_gpus, default=0))
        self.down: set[int] = set()
        self.used_gpus = 0  # GPUs held by allocations, over all nodes
        # On a typed cluster, GPUs held per accelerator type (``used_by_type``), kept with it.
        self.used_by_type: dict[str, int] = dict.fromkeys(cluster.types, 0)

    def copy(self) -> Ledger:
        other = Ledger.__new__(Ledger)
        other.cluster, other.capacity = self.cluster, self.capacity
        other.free = [list(f) for f in self.free]
        other.free_gpus = list(self.free_gpus)
        other.by_free = self.by_free.copy()
        other.down = set(self.down)
        other.used_gpus = self.used_gpus
        other.used_by_type = dict(self.used_by_type)
        return other

    # -- checks --------------------------------------------------------------------------------
    def shortfall(self, spec: JobSpec, alloc: Allocation) -> Refusal | None:
        """The first reason ``alloc`` of ``spec`` does not fit now, or None if it fits."""
        n = len(self.free)
        if (self.cluster.typed and alloc and all(0 <= node < n for node, _ in alloc.workers)
                and (why := type_problem(self.cluster, spec, alloc))):
                return Refusal(spec.job_id, RefusalCode.TYPE, why, alloc.workers[0][0])
        need: dict[int, list[float]] = {}
        for counts, demand in _parts(spec, alloc):
            for node, k in counts:
                if node < 0 or node >= n:
                    return Refusal(spec.job_id, RefusalCode.NODE_DOWN,
                                   f"does not exist (cluster has {n})", node)
                if node in self.down:
                    return Refusal(spec.job_id, RefusalCode.NODE_DOWN, "is down", node)
                acc = need.setdefault(node, [0.0] * 4)
                for r in range(4):
                    acc[r] += k * demand[r]
        for node in sorted(need):
            free = self.free[node]
            for r in range(4):
                if need[node][r] > free[r] + _EPS:
                    return Refusal(spec.job_id, RefusalCode.CAPACITY,
                                   f"needs {need[node][r]:g}, {max(free[r], 0.0):g} free", node,
                                   RESOURCE_NAMES[r], need[node][r] - free[r])
        return None

    def fits(self, spec: JobSpec, alloc: Allocation) -> bool:
        return self.shortfall(spec, alloc) is None

    # -- changes -------------------------------------------------------------------------------
    def take(self, spec: JobSpec, alloc: Allocation) -> None:
        """Charge ``alloc``; callers check ``shortfall`` first (this does not refuse)."""
        self._charge(spec, alloc, -1.0)

    def give(self, spec: JobSpec, alloc: Allocation) -> None:
        """Return ``alloc``'s resources."""
        self._charge(spec, alloc, 1.0)

    def set_down(self, node: int, down: bool) -> None:
        """Mark a node down (it then shows nothing free, and nothing may be placed on it) or up
        again (all free). Callers first take every allocation off a node that goes down."""
        if down:
            self.down.add(node)
            self.free[node] = [0.0] * 4
        else:
            self.down.discard(node)
            self.free[node] = list(self.capacity[node])
        self._refresh_gpus(node)

    def _charge(self, spec: JobSpec, alloc: Allocation, sign: float) -> None:
        for counts, demand in _parts(spec, alloc):
            for node, k in counts:
                free = self.free[node]
                for r in range(4):
                    if demand[r]:
                        free[r] += sign * k * demand[r]
                gpus = int(k * demand[0])
                self.used_gpus -= int(sign) * gpus
                if self.used_by_type and gpus:
                    t = self.cluster.nodes[node].gpu_type
                    self.used_by_type[t] -= int(sign) * gpus
                self._refresh_gpus(node)

    def _refresh_gpus(self, node: int) -> None:
        old, new = self.free_gpus[node], int(self.free[node][0] + _EPS)
        if new != old:
            self.free_gpus[node] = new
            self.by_free.move(node, old, new)


def _parts(spec: JobSpec, alloc: Allocation) -> list[tuple[tuple[tuple[int, int], ...], tuple[float, ...]]]:
    parts: list[tuple[tuple[tuple[int, int], ...], tuple[float, ...]]] = [
        (alloc.workers, spec.worker_demand.as_tuple())]
    if alloc.ps and spec.ps_demand is not None:
        parts.append((alloc.ps, spec.ps_demand.as_tuple()))
    return parts
