"""Optimus (Peng et al., EuroSys'18): greedy marginal-gain allocation from a fitted speed model.

1. Speed model: for each kind of job (application, batch size, size bounds) the policy samples
   the performance model at a few worker counts and fits Optimus' form
   ``1 / speed(n) = a + b / n + c * n`` (compute shrinking with n, a constant, and a
   communication cost growing with n) by non-negative least squares. Here it is fitted to the
   Pollux profiles (or to the scaling model for duration-only traces), not learned online.
2. Every running job keeps ``min_workers``; waiting jobs then start at ``min_workers``, shortest
   estimated remaining time first, while GPUs remain.
3. Each remaining GPU goes, one worker at a time, to the job with the largest marginal gain:
   the reduction of its estimated remaining time ``rem / speed(n) - rem / speed(n + 1)`` per GPU,
   up to ``max_workers`` and while the gain is positive.
4. Placement keeps workers where they are: a shrinking job leaves the nodes where it has the
   fewest workers, a growing one fills its own nodes first, then the fullest nodes that fit.
Re-planned at arrivals, completions and every ``tick_s`` (60 s, Pollux's interval). Cost per pass:
O(active jobs + GPUs x log jobs): meant for elastic workloads of hundreds of jobs.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.job import JobSpec
from stint.placement.packing import in_order
from stint.policies.base import ClusterView, JobStatus, PerfModel, Phase
from stint.policies.registry import register

_SAMPLES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """Optimus' fitted speed: work units per second on ``n`` workers."""

    a: float
    b: float
    c: float

    def speed(self, n: int) -> float:
        if n <= 0:
            return 0.0
        inv = self.a + self.b / n + self.c * n
        return 1.0 / inv if inv > 0 else 0.0

    @staticmethod
    def fit(perf: PerfModel, spec: JobSpec, per_node: int) -> SpeedModel:
        """Least-squares fit (non-negative) of ``1/speed`` on consolidated placements."""
        ns = [n for n in _SAMPLES if spec.min_workers <= n <= spec.max_workers] or [spec.min_workers]
        if spec.max_workers not in ns:
            ns.append(spec.max_workers)
        rows, ys = [], []
        for n in ns:
            r = perf.rate(spec, _packed(n, per_node))
            if r > 0:
                rows.append((1.0, 1.0 / n, float(n)))
                ys.append(1.0 / r)
        if not rows:
            return SpeedModel(0.0, 0.0, 0.0)
        coef, _ = nnls(np.array(rows), np.array(ys))
        return SpeedModel(float(coef[0]), float(coef[1]), float(coef[2]))


def _packed(n: int, per_node: int) -> Allocation:
    full, rest = divmod(n, per_node)
    nodes = dict.fromkeys(range(full), per_node)
    if rest:
        nodes[full] = rest
    return Allocation.of(nodes)


@register("optimus")
class Optimus:
    """Greedy marginal-gain worker allocation (elastic jobs are resized, rigid ones start whole)."""

    def __init__(self, tick_s: float = 60.0) -> None:
        self.name = "optimus"
        self.tick_s: float | None = tick_s
        self._models: dict[tuple[object, ...], SpeedModel] = {}

    def model(self, view: ClusterView, spec: JobSpec) -> SpeedModel:
        key = (spec.application, spec.batch_size, spec.requested_workers, spec.min_workers, spec.max_workers)
        m = self._models.get(key)
        if m is None:
            per_node = max(int(n.capacity.gpu) for n in view.cluster.nodes)
            m = self._models[key] = SpeedModel.fit(view.perf, spec, max(per_node, 1))
        return m

    def plan(self, view: ClusterView) -> Plan:
        target = self._targets(view)
        return _place_targets(view, target)

    def _targets(self, view: ClusterView) -> dict[str, int]:
        now = view.now
        gpus_left = view.cluster.total_gpus
        target: dict[str, int] = {}
        waiting: list[tuple[float, float, str, JobStatus]] = []
        for st in view.jobs:  # rule 2: running jobs keep their minimum
            spec = st.spec
            if st.phase is Phase.RUNNING:
                target[st.job_id] = spec.min_workers
                gpus_left -= spec.min_workers * spec.gpus_per_worker
            else:
                rem = (spec.work - st.work_done_at(now)) / max(self.model(view, spec).speed(spec.min_workers), 1e-12)
                waiting.append((rem, spec.arrival_s, st.job_id, st))
        waiting.sort(key=lambda w: w[:3])
        for _, _, jid, st in waiting:
            need = st.spec.min_workers * st.spec.gpus_per_worker
            if need <= gpus_left:
                target[jid] = st.spec.min_workers
                gpus_left -= need
        heap: list[tuple[float, str]] = []
        by_id = {st.job_id: st for st in view.jobs if st.job_id in target}
        for jid, n in target.items():
            self._push_gain(view, heap, by_id[jid], n)
        while heap and gpus_left > 0:  # rule 3
            _, jid = heapq.heappop(heap)
            st = by_id[jid]
            gpw = st.spec.gpus_per_worker
            if gpw > gpus_left:
                continue
            target[jid] += 1
            gpus_left -= gpw
            self._push_gain(view, heap, st, target[jid])
        return target

    def _push_gain(self, view: ClusterView, heap: list[tuple[float, str]], st: JobStatus, n: int) -> None:
        spec = st.spec
        if n >= spec.max_workers:
            return
        m = self.model(view, spec)
        s0, s1 = m.speed(n), m.speed(n + 1)
        if s1 <= s0 or s0 <= 0:
            return
        rem = spec.work - st.work_done_at(view.now)
        gain = (rem / s0 - rem / s1) / max(spec.gpus_per_worker, 1)
        heapq.heappush(heap, (-gain, st.job_id))


def _place_targets(view: ClusterView, target: dict[str, int]) -> Plan:
    """Rule 4: turn worker counts into a plan that moves as few workers as possible."""
    free = list(view.free_gpus)
    plan = Plan()
    grow: list[tuple[JobStatus, int]] = []
    for st in view.jobs:
        want = target.get(st.job_id, 0)
        have = st.allocation.num_workers
        if want < have:
            plan.allocations[st.job_id] = _shrink(st, want, free)
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
