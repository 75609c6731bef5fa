"""DRF: dominant resource fairness (Ghodsi et al., NSDI'11) over jobs' resource vectors.

A job's demand is its worker vector times its workers plus, for parameter-server jobs, its PS
vector times its PSs (OASiS constraint (6): enough PSs that ``b_i * workers <= B_i * PSs``), over
GPU, CPU, memory and network. An *entity* (``by="user"``, the default; ``"vc"``; or ``"job"``) has
a *dominant share*: the largest, over resources, of its running jobs' total demand divided by the
cluster's capacity. Progressive filling, re-computed at every arrival and completion:
1. Take the entity with the smallest dominant share that has a waiting job (ties: the entity whose
   oldest waiting job arrived first, then by name).
2. Start its oldest waiting job at its requested size if it fits on the free resources
   (consolidated placement, every resource checked per node); its share grows accordingly.
3. If it does not fit, that entity is done for this pass (its jobs keep their order).
4. Repeat until no entity can start a job.
Running jobs are never preempted: with rigid jobs, DRF equalises shares through what it starts.
Cost per pass: O(changed jobs + entities + jobs started).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Sequence

import numpy as np

from stint.model.allocation import Allocation, Plan
from stint.model.job import JobSpec
from stint.perf.ps_model import ps_needed
from stint.placement.free_index import ScratchFree
from stint.placement.ledger import Ledger
from stint.placement.packing import consolidated, pack_vectors, take
from stint.policies.base import ClusterView, JobStatus, Phase, PolicyBase
from stint.policies.registry import register

Vec = tuple[float, float, float, float]


def demand(spec: JobSpec, workers: int) -> Vec:
    """Total resource vector of a job with ``workers`` workers (and its PSs)."""
    w = spec.worker_demand.as_tuple()
    total = [x * workers for x in w]
    if spec.ps_demand is not None:
        p = spec.ps_demand.as_tuple()
        k = ps_needed(spec, workers)
        total = [a + x * k for a, x in zip(total, p)]
    return (total[0], total[1], total[2], total[3])


@register("drf")
class Drf(PolicyBase):
    """Dominant-resource max-min fairness between users (or virtual clusters, or jobs)."""

    tick_s: float | None = None
    lazy_progress = True  # reads progress only through *_at(now)

    def __init__(self, by: str = "user") -> None:
        if by not in ("user", "vc", "job"):
            raise ValueError(f"drf: 'by' must be user, vc or job (got {by!r})")
        self.name = "drf"
        self.by = by
        self._stream: int | None = None
        self._usage: dict[str, list[float]] = {}  # entity -> running demand
        self._held: dict[str, tuple[str, Vec]] = {}  # running job -> (entity, demand)
        self._queues: dict[str, list[tuple[float, str]]] = {}  # entity -> waiting (arrival, id)
        self._waiting: dict[str, tuple[str, float]] = {}  # waiting job -> (entity, arrival)

    def entity(self, spec: JobSpec) -> str:
        return spec.job_id if self.by == "job" else spec.vc if self.by == "vc" else spec.user

    def plan(self, view: ClusterView) -> Plan:
        self._sync(view)
        by_id = view.by_id if view.by_id is not None else {st.job_id: st for st in view.jobs}
        cap = view.cluster.total.as_tuple()
        free = _Free(view)
        free_gpus = float(view.free_index.total if view.free_index is not None else sum(view.free_gpus))
        usage = {e: list(u) for e, u in self._usage.items()}
        heap = [(_dominant(usage.get(e), cap), q[0][0], e) for e, q in self._queues.items() if q]
        heapq.heapify(heap)
        taken = {e: 0 for _, _, e in heap}
        plan = Plan()
        while heap:
            _, _, e = heapq.heappop(heap)  # rule 1
            queue = self._queues[e]
            _, jid = queue[taken[e]]
            spec = by_id[jid].spec
            d = demand(spec, spec.requested_workers)
            if d[0] > free_gpus:
                continue  # rule 3, decided without looking at nodes
            placed = free.place(spec)  # rule 2
            if placed is None:
                continue  # rule 3
            plan.allocations[jid] = placed
            free_gpus -= d[0]
            u = usage.setdefault(e, [0.0] * 4)
            for r in range(4):
                u[r] += d[r]
            taken[e] += 1
            if taken[e] < len(queue):
                heapq.heappush(heap, (_dominant(u, cap), queue[taken[e]][0], e))
        return plan

    # ------------------------------------------------------------------ derived state
    def _sync(self, view: ClusterView) -> None:
        if view.by_id is None or view.stream is None or view.stream != self._stream:
            self._stream = view.stream
            self._usage, self._held, self._queues, self._waiting = {}, {}, {}, {}
            for st in view.jobs:
                self._file(st)
            return
        for jid in view.changed:
            self._unfile(jid)
            found = view.by_id.get(jid)
            if found is not None:
                self._file(found)

    def _file(self, st: JobStatus) -> None:
        e = self.entity(st.spec)
        if st.phase is Phase.RUNNING:
            d = demand(st.spec, st.allocation.num_workers)
            self._held[st.job_id] = (e, d)
            u = self._usage.setdefault(e, [0.0] * 4)
            for r in range(4):
                u[r] += d[r]
        else:
            insort(self._queues.setdefault(e, []), (st.spec.arrival_s, st.job_id))
            self._waiting[st.job_id] = (e, st.spec.arrival_s)

    def _unfile(self, jid: str) -> None:
        held = self._held.pop(jid, None)
        if held is not None:
            u = self._usage[held[0]]
            for r in range(4):
                u[r] -= held[1][r]
        waiting = self._waiting.pop(jid, None)
        if waiting is not None:
            q = self._queues[waiting[0]]
            del q[bisect_left(q, (waiting[1], jid))]


def _dominant(usage: Sequence[float] | None, cap: Vec) -> float:
    """The dominant share: max over resources of usage / capacity (DRF's definition)."""
    if usage is None:
        return 0.0
    return max((u / c) for u, c in zip(usage, cap) if c > 0)


class _Free:
    """A pass's free resources: while every job placed needs one whole GPU per worker and
    nothing else, a ``ScratchFree`` over the ledger's index (``pack_vectors`` on such a demand
    picks the nodes ``consolidated`` picks: best fit, else roomiest first, lowest index on ties);
    from the first other job on, free vectors per node (built once, with the pass's placements
    so far taken off)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.gpus = ScratchFree(view.free_gpus, view.free_index) if view.free_index is not None else None
        self.vectors: np.ndarray | None = None
        self.placed: list[tuple[JobSpec, Allocation]] = []

    def place(self, spec: JobSpec) -> Allocation | None:
        if self.gpus is not None and self.vectors is None and _one_gpu_only(spec):
            got = consolidated(self.gpus, spec.requested_workers)
            if got is None:
                return None
            take(self.gpus, got)
            alloc = Allocation.of(got)
            self.placed.append((spec, alloc))
            return alloc
        if self.vectors is None:
            self.vectors = _free_vectors(self.view)
            for done, alloc in self.placed:
                for node, k in alloc.workers:
                    self.vectors[node] -= k * np.array(done.worker_demand.as_tuple())
        return _place(spec, self.vectors)


def _one_gpu_only(spec: JobSpec) -> bool:
    return spec.ps_demand is None and spec.worker_demand.as_tuple() == (1.0, 0.0, 0.0, 0.0)


def _free_vectors(view: ClusterView) -> np.ndarray:
    """Free (gpu, cpu, mem, net) per node: the mechanism's ledger, or one built from the jobs
    (a hand-made view)."""
    if view.free_resources is not None:
        return np.array(view.free_resources, dtype=float)
    ledger = Ledger(view.cluster)
    for st in view.jobs:
        ledger.take(st.spec, st.allocation)
    return np.array(ledger.free, dtype=float)


def _place(spec: JobSpec, free: np.ndarray) -> Allocation | None:
    """Consolidated placement of workers, then PSs, checking every resource; commits to ``free``."""
    w = np.array(spec.worker_demand.as_tuple())
    workers = pack_vectors(free, w, spec.requested_workers)
    if workers is None:
        return None
    ps: dict[int, int] = {}
    if spec.ps_demand is not None:
        p = np.array(spec.ps_demand.as_tuple())
        packed = pack_vectors(free, p, ps_needed(spec, spec.requested_workers))
        if packed is None:
            for i, n in workers.items():
                free[i] += n * w
            return None
        ps = packed
    return Allocation.of(workers, ps)
