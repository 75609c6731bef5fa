"""Shared machinery for priority-ordered policies (FIFO, SJF/SRTF, Tiresias).

``OrderIndex`` keeps the active jobs split into *waiting* (queued or paused) and *running*, each
sorted best-first by a policy's key, and keeps them current from ``ClusterView.changed`` so that a
scheduling pass costs O(changed jobs + jobs started) rather than O(active jobs). It is derived
state only: it rebuilds itself from ``view.jobs`` whenever the view does not promise a complete
``changed`` list (``by_id`` unset) or comes from another stream.

``fill`` is the one scheduling pass they share: walk waiting jobs best-first, place each on free
GPUs, optionally preempting strictly worse running jobs, staging each job's victims and committing
them only if the job then fits (plan tentatively, commit or discard as a unit).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from typing import Any

from stint.model.allocation import EMPTY, Allocation, Plan, Wait, WaitCode
from stint.placement.free_index import ScratchFree
from stint.placement.packing import give, place, take
from stint.policies.base import ClusterView, JobStatus, Phase

Key = Any  # a policy's sort key: any totally ordered value, smaller = served first


class OrderIndex:
    """Waiting and running jobs, each a sorted list of ``(key, job_id)``."""

    def __init__(self, key: Callable[[JobStatus, float], Key]) -> None:
        self._key = key
        self.waiting: list[tuple[Key, str]] = []
        self.running: list[tuple[Key, str]] = []
        self._filed: dict[str, tuple[Key, bool]] = {}  # job id -> (key, is_running)
        self._stream: int | None = None

    def needs_rebuild(self, view: ClusterView) -> bool:
        """True if ``view`` does not continue the stream this index follows."""
        return view.by_id is None or view.stream is None or view.stream != self._stream

    def sync(self, view: ClusterView) -> None:
        """Bring the index up to date with ``view`` (incrementally when the view allows it)."""
        if self.needs_rebuild(view):
            self._stream = view.stream
            self.waiting, self.running, self._filed = [], [], {}
            for st in view.jobs:
                self.file(st, view.now)
            return
        by_id = view.by_id
        assert by_id is not None  # needs_rebuild() is False
        for job_id in view.changed:
            self.unfile(job_id)
            found = by_id.get(job_id)
            if found is not None:
                self.file(found, view.now)

    def file(self, st: JobStatus, now: float) -> None:
        key = self._key(st, now)
        is_running = st.phase is Phase.RUNNING
        insort(self.running if is_running else self.waiting, (key, st.job_id))
        self._filed[st.job_id] = (key, is_running)

    def unfile(self, job_id: str) -> None:
        entry = self._filed.pop(job_id, None)
        if entry is None:
            return
        key, is_running = entry
        lst = self.running if is_running else self.waiting
        i = bisect_left(lst, (key, job_id))
        del lst[i]

    def refile(self, st: JobStatus, now: float) -> None:
        """Re-key one job (its priority changed, e.g. a Tiresias demotion)."""
        self.unfile(st.job_id)
        self.file(st, now)

    def __len__(self) -> int:
        return len(self._filed)


def fill(
    view: ClusterView,
    index: OrderIndex,
    *,
    preempts: Callable[[Key, Key], bool] | None = None,
    max_skip: int = 0,
    strategy: str = "consolidated",
    policy: str = "",
) -> Plan:
    """One scheduling pass over ``index`` (already synced with ``view``).

    1. Waiting jobs are taken best-first; a job too big for the whole cluster is rejected.
    2. If it fits on free GPUs it starts (placed by ``strategy``).
    3. Otherwise, if ``preempts(waiting_key, running_key)`` says so, running jobs are staged as
       victims worst-first until it fits; the victims are committed only if it then fits.
    4. A job that still does not fit is skipped; after ``max_skip`` skips the pass ends
       (``max_skip=0`` is strict head-of-line blocking, as FIFO). The pass also ends when no GPU
       is free and the job cannot preempt: ``preempts`` must be monotone (a job that cannot
       preempt the worst running job cannot be followed by one that can), as key orders are.
    5. When the view asks (``view.explain``), every waiting job the pass looked at gets its
       reason (``Plan.waiting``): too big for the free GPUs, or preempted for a named job; the
       jobs after the one that ended the pass wait behind it (the first ``EXPLAIN_BEHIND``).
    """
    by_id = view.by_id if view.by_id is not None else {st.job_id: st for st in view.jobs}
    free: list[int] | ScratchFree
    if view.free_index is not None:  # copy on write over the ledger's index: no scan of nodes
        free = ScratchFree(view.free_gpus, view.free_index)
        free_total = free.total
    else:
        free = list(view.free_gpus)
        free_total = sum(free)
    cluster_total = view.cluster.total_gpus
    plan = Plan()
    worst = len(index.running)  # running[worst:] are committed victims
    skipped = 0
    # GPUs that free + every preemptable victim could offer the current waiting job. A failed
    # staging measures it; since keys only get worse down the list, later jobs can never get
    # more, so any later job needing more is skipped in O(1) (it would only stage and discard).
    reachable = cluster_total
    why = _Why(plan, policy or "policy") if view.explain else None
    for wkey, wid in index.waiting:
        spec = by_id[wid].spec
        gpw = int(spec.worker_demand.gpu)
        need = spec.requested_workers * gpw
        if need > cluster_total:
            plan.reject[wid] = f"needs {need} GPUs; the cluster has {cluster_total}"
            continue
        can_preempt = preempts is not None and worst > 0 and preempts(wkey, index.running[worst - 1][0])
        if (need > free_total and not can_preempt) or need > reachable:
            skipped += 1
            if why is not None:
                why.capacity(wid, need, free_total)
            if skipped > max_skip or free_total <= 0:
                if why is not None:
                    why.behind(index, wid)
                break
            continue
        placement = place(free, spec.requested_workers, gpw, strategy) if need <= free_total else None
        staged = worst
        while placement is None and preempts is not None and staged > 0:
            rkey, rid = index.running[staged - 1]
            if rid in plan.allocations or not preempts(wkey, rkey):
                break
            staged -= 1
            victim = by_id[rid]
            give(free, victim.allocation, victim.spec.gpus_per_worker)
            free_total += victim.held_gpus
            if need <= free_total:
                placement = place(free, spec.requested_workers, gpw, strategy)
        if placement is None:  # discard the staged victims
            reachable = min(reachable, free_total)
            for _, rid in index.running[staged:worst]:
                victim = by_id[rid]
                take(free, victim.allocation, victim.spec.gpus_per_worker)
                free_total -= victim.held_gpus
            skipped += 1
            if why is not None:
                why.capacity(wid, need, free_total)
            if skipped > max_skip:
                if why is not None:
                    why.behind(index, wid)
                break
            continue
        for _, rid in index.running[staged:worst]:  # commit
            plan.allocations[rid] = EMPTY
            if why is not None:
                why.preempted(rid, wid)
        worst = staged
        take(free, placement, gpw)
        free_total -= need
        reachable -= need
        plan.allocations[wid] = Allocation.of(placement)
    return plan


EXPLAIN_BEHIND = 200  # waiting jobs after the head of the line that get a reason per pass


class _Why:
    """Builds ``Plan.waiting`` for one pass of ``fill``."""

    def __init__(self, plan: Plan, policy: str) -> None:
        self.plan, self.policy = plan, policy

    def capacity(self, job_id: str, need: int, free: int) -> None:
        self.plan.waiting[job_id] = Wait(WaitCode.CAPACITY, f"needs {need} GPUs, {free} free")

    def preempted(self, job_id: str, for_job: str) -> None:
        self.plan.waiting[job_id] = Wait(WaitCode.PREEMPTED,
                                         f"preempted for job {for_job} ({self.policy})")

    def behind(self, index: OrderIndex, head: str) -> None:
        after, told = False, 0
        for _, wid in index.waiting:
            if told >= EXPLAIN_BEHIND:
                break
            if after and wid not in self.plan.allocations and wid not in self.plan.reject:
                self.plan.waiting[wid] = Wait(WaitCode.BEHIND,
                                              f"behind job {head} ({self.policy}, head of line)")
                told += 1
            after = after or wid == head
