"""Optimus (Peng et al., EuroSys'18) as Pollux's simulator runs it (Qiao et al., OSDI'21).

1. Admission: every active job, in arrival order, gets its smallest size (one worker for an
   elastic job, its requested size for a rigid one) while GPUs remain; a job that does not fit
   gets none (skipping at most ``max_skip`` of them), and so does every job after the GPUs run
   out (a running one is stopped). GPUs are those of the nodes up, whatever holds them now.
2. Growth: each remaining GPU goes, one step at a time, to the job with the largest gain: the
   time its known remaining work (``JobStatus.known_remaining_at``: declared or estimated; the
   true work under ``--knowledge oracle``, as Pollux's simulator gives it) saves on the next
   feasible worker count, ``rem / rate(n) - rem / rate(m)``, per GPU added, where ``rate`` is the
   performance model's true rate (for Pollux workloads, the measured step times) packed on the
   fewest nodes. A job stops growing at its first non-positive gain or at ``max_workers``.
3. Placement as Pollux's: a job whose worker count is unchanged keeps its workers; the others
   are placed afresh, smallest count first, on the nodes with the most free GPUs first.
Re-planned at arrivals, completions and, while elastic jobs are active, every ``tick_s`` (60 s,
Pollux's interval). A pass costs O(active jobs + GPUs x log jobs).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from stint.model.allocation import EMPTY, Allocation, Plan
from stint.placement.packing import in_order, packed
from stint.policies.base import ClusterView, JobStatus, PolicyBase
from stint.policies.registry import register


@register("optimus")
class Optimus(PolicyBase):
    """Arrival-order admission at the smallest size, then greedy growth by the true step time."""

    name = "optimus"
    lazy_progress = True  # reads progress only through *_at(now)

    def __init__(self, tick_s: float = 60.0, max_skip: int = 64) -> None:
        self.tick_s: float | None = tick_s
        self.max_skip = max_skip
        self._rates: dict[str, dict[int, float]] = {}  # job -> workers -> rate, packed
        self._elastic = False  # an elastic job was active at the last pass

    def next_due(self) -> float | None:
        """Only elastic jobs gain from periodic re-planning; without them ticks are skipped."""
        return 0.0 if self._elastic else None

    def plan(self, view: ClusterView) -> Plan:
        jobs = list(view.jobs)
        self._elastic = any(st.spec.elastic for st in jobs)
        if len(self._rates) > 4 * len(jobs) + 64:  # forget finished jobs now and then
            active = {st.job_id for st in jobs}
            self._rates = {k: v for k, v in self._rates.items() if k in active}
        target = self._targets(view, jobs)
        return _place_fresh(view, jobs, target)

    def _targets(self, view: ClusterView, jobs: list[JobStatus]) -> dict[str, int]:
        gpus_left = sum(n.capacity.gpu for i, n in enumerate(view.cluster.nodes)
                        if i not in view.down_nodes)
        gpus_left = int(gpus_left)
        target: dict[str, int] = {}
        skipped = 0
        for st in jobs:  # rule 1, in arrival order
            spec = st.spec
            least = spec.feasible_counts()[0]
            need = least * spec.gpus_per_worker
            if gpus_left <= 0 or skipped > self.max_skip:
                break
            if need <= gpus_left:
                target[st.job_id] = least
                gpus_left -= need
            else:
                skipped += 1
        by_id = {st.job_id: st for st in jobs if st.job_id in target}
        heap: list[tuple[float, int, str, int]] = []
        for i, (jid, n) in enumerate(target.items()):
            self._push_gain(view, heap, by_id[jid], n, i)
        order = {jid: i for i, jid in enumerate(target)}
        while heap and gpus_left > 0:  # rule 2
            _, _, jid, m = heapq.heappop(heap)
            st = by_id[jid]
            add = (m - target[jid]) * st.spec.gpus_per_worker
            if add > gpus_left:
                continue  # does not fit: this job grows no further
            target[jid] = m
            gpus_left -= add
            self._push_gain(view, heap, st, m, order[jid])
        return target

    def _push_gain(self, view: ClusterView, heap: list[tuple[float, int, str, int]], st: JobStatus,
                   n: int, order: int) -> None:
        """The job's next feasible size above ``n`` with its gain per GPU, if the gain is positive."""
        spec = st.spec
        m = next((c for c in spec.feasible_counts() if c > n), 0)
        if not m:
            return
        r0, r1 = self._rate(view, st, n), self._rate(view, st, m)
        if r0 <= 0 or r1 <= 0:
            return
        rem = st.known_remaining_at(view.now)
        gain = (rem / r0 - rem / r1) / ((m - n) * max(spec.gpus_per_worker, 1))
        if gain > 0:  # the first non-positive gain ends the job's growth
            heapq.heappush(heap, (-gain, order, st.job_id, m))

    def _rate(self, view: ClusterView, st: JobStatus, n: int) -> float:
        """The performance model's rate on ``n`` workers packed on the fewest nodes."""
        per_job = self._rates.setdefault(st.job_id, {})
        got = per_job.get(n)
        if got is None:
            per_node = max(max(int(c.capacity.gpu) for c in view.cluster.nodes)
                           // max(st.spec.gpus_per_worker, 1), 1)
            got = per_job[n] = view.perf.rate(st.spec, packed(n, per_node))
        return got


def _place_fresh(view: ClusterView, jobs: list[JobStatus], target: Mapping[str, int]) -> Plan:
    """Rule 3: jobs whose count changes give up their workers, then are placed in ascending
    count (then arrival) order, each on the nodes with the most free GPUs first."""
    free = list(view.free_gpus)
    plan = Plan()
    moved: list[tuple[int, int, JobStatus]] = []
    for i, st in enumerate(jobs):
        want = target.get(st.job_id, 0)
        if want == st.allocation.num_workers:
            continue
        for node, k in st.allocation.workers:
            free[node] += k * st.spec.gpus_per_worker
        if want:
            moved.append((want, i, st))
        else:
            plan.allocations[st.job_id] = EMPTY
    for want, _, st in sorted(moved, key=lambda m: (m[0], m[1])):
        gpw = st.spec.gpus_per_worker
        order = sorted(range(len(free)), key=lambda i: (-free[i], i))
        added = in_order(free, want, gpw, order)
        if added is None:
            if st.allocation:
                plan.allocations[st.job_id] = EMPTY
            continue
        for node, k in added.items():
            free[node] -= k * gpw
        plan.allocations[st.job_id] = Allocation.of(added)
    return plan


def _place_targets(
    view: ClusterView, by_id: Mapping[str, JobStatus], target: dict[str, int], elastic: Mapping[str, None]
) -> Plan:
    """Rule 4: turn worker counts into a plan that moves as few workers as possible.

    Only elastic jobs and jobs given a size can change: a rigid running job holds its minimum.
    """
    free = list(view.free_gpus)
    plan = Plan()
    grow: list[tuple[JobStatus, int]] = []
    for jid in {**dict.fromkeys(elastic), **dict.fromkeys(target)}:
        st = by_id[jid]
        want = target.get(jid, 0)
        have = st.allocation.num_workers
        if want < have:
            plan.allocations[jid] = _shrink(st, want, free)
        elif want > have:
            grow.append((st, want))
    for st, want in grow:
        alloc = _grow(st, want, free)
        if alloc is not None:
            plan.allocations[st.job_id] = alloc
    return plan


def _shrink(st: JobStatus, want: int, free: list[int]) -> Allocation:
    gpw = st.spec.gpus_per_worker
    counts = dict(st.allocation.workers)
    drop = st.allocation.num_workers - want
    for node in sorted(counts, key=lambda i: (counts[i], i)):
        k = min(drop, counts[node])
        counts[node] -= k
        free[node] += k * gpw
        drop -= k
        if not drop:
            break
    return Allocation.of(counts) if want else EMPTY


def _grow(st: JobStatus, want: int, free: list[int]) -> Allocation | None:
    gpw = st.spec.gpus_per_worker
    counts = dict(st.allocation.workers)
    left = want - st.allocation.num_workers
    order = sorted(range(len(free)), key=lambda i: (i not in counts, -free[i], i))
    added = in_order(free, left, gpw, order)
    if added is None:
        return None
    for node, k in added.items():
        free[node] -= k * gpw
        counts[node] = counts.get(node, 0) + k
    return Allocation.of(counts)
