"""Round-robin placement of workers and parameter servers on free capacity per node.

The paper's PS baselines (fifo-fixed, drf-ps, rrh, dorm) place tasks round-robin (§V: "FIFO, DRF
and RRH place tasks round-robin"): workers go on worker hosts (role != "ps"), PSs on PS hosts
(role "ps"; a cluster without a PS group puts them on its role "any" nodes, never on a node of
role "worker"); each task goes on the next host after the previous task's host that still fits it
(every resource of its demand: GPU, CPU, memory, bandwidth).
``FreeCapacity`` is a policy's scratch copy of the free resources per node (it never touches the
mechanism's ledger); PSs are sized by eq. (6) (``perf.ps_model.ps_needed``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import numpy as np

from stint.model.allocation import Allocation
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.ps_model import ps_needed


class Held(Protocol):
    """A job holding an allocation (a policy's ``JobStatus``)."""

    @property
    def spec(self) -> JobSpec: ...

    @property
    def allocation(self) -> Allocation: ...


def ps_hosts(cluster: Cluster) -> list[int]:
    """The nodes that host PSs: the PS group (role "ps") where the cluster has one, else the
    nodes of role "any" (a node of role "worker" never hosts a PS)."""
    group = [i for i, n in enumerate(cluster.nodes) if n.role == "ps"]
    return group or [i for i, n in enumerate(cluster.nodes) if n.role == "any"]


def demand(spec: JobSpec, ps: bool = False) -> np.ndarray:
    res = spec.ps_demand if ps else spec.worker_demand
    return np.array(res.as_tuple() if res is not None else (0.0,) * 4)


class FreeCapacity:
    """Free resources per node after the allocations of ``held`` jobs (nodes ``down`` offer
    none), with round-robin pointers."""

    def __init__(self, cluster: Cluster, held: Iterable[Held] = (),
                 down: Iterable[int] = ()) -> None:
        self.free = np.array([n.capacity.as_tuple() for n in cluster.nodes], dtype=np.float64)
        for node in down:  # a node that is down has nothing to offer
            self.free[node] = 0.0
        self.hosts = {False: [i for i, n in enumerate(cluster.nodes) if n.role != "ps"],
                      True: ps_hosts(cluster)}
        self.next = {False: 0, True: 0}
        for st in held:
            self.take(st.spec, st.allocation)

    def totals(self, ps: bool) -> np.ndarray:
        """Capacity of the worker (or PS) host group, per resource."""
        nodes = self.hosts[ps]
        return self.free[nodes].sum(axis=0) if nodes else np.zeros(4)

    def take(self, spec: JobSpec, alloc: Allocation, sign: int = 1) -> None:
        for node, c in alloc.workers:
            self.free[node] -= sign * c * demand(spec)
        for node, c in alloc.ps:
            self.free[node] -= sign * c * demand(spec, True)

    def _place_one(self, need: np.ndarray, ps: bool) -> int | None:
        nodes = self.hosts[ps]
        for k in range(len(nodes)):
            i = (self.next[ps] + k) % len(nodes)
            node = nodes[i]
            if (self.free[node] + 1e-9 >= need).all():
                self.free[node] -= need
                self.next[ps] = (i + 1) % len(nodes)
                return node
        return None

    def grow(self, spec: JobSpec, workers: dict[int, int], ps: dict[int, int]) -> bool:
        """Add one worker (and the PS that (6) then needs) round-robin; False if it won't fit."""
        y = sum(workers.values())
        w = self._place_one(demand(spec), False)
        if w is None:
            return False
        if ps_needed(spec, y + 1) > sum(ps.values()):
            p = self._place_one(demand(spec, True), True)
            if p is None:
                self.free[w] += demand(spec)
                return False
            ps[p] = ps.get(p, 0) + 1
        workers[w] = workers.get(w, 0) + 1
        return True

    def place(self, spec: JobSpec, count: int, partial: bool = False) -> Allocation | None:
        """``count`` workers plus their PSs, round-robin. All or nothing unless ``partial``."""
        workers: dict[int, int] = {}
        ps: dict[int, int] = {}
        while sum(workers.values()) < count and self.grow(spec, workers, ps):
            pass
        alloc = Allocation.of(workers, ps)
        if sum(workers.values()) < count and not partial:
            self.take(spec, alloc, sign=-1)
            return None
        return alloc


def fits_empty(cluster: Cluster, spec: JobSpec, count: int) -> bool:
    """Could ``count`` workers (and PSs) of ``spec`` run on the empty cluster?"""
    return FreeCapacity(cluster).place(spec, count) is not None
