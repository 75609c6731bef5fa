"""Optimus (Peng et al., EuroSys'18): greedy marginal-gain allocation from a fitted speed model.

1. Speed model: for each kind of job (application, batch size, size bounds) the policy samples
   the performance model at a few worker counts and fits Optimus' form
   ``1 / speed(n) = a + b / n + c * n`` (compute shrinking with n, a constant, and a
   communication cost growing with n) by non-negative least squares. Here it is fitted to the
   Pollux profiles (or to the scaling model for duration-only traces), not learned online.
2. Every running job keeps ``min_workers``; waiting jobs then start at ``min_workers``, shortest
   estimated remaining time first, while GPUs remain (skipping at most ``max_skip`` that do not
   fit).
3. Each remaining GPU goes, one worker at a time, to the job with the largest marginal gain:
   the reduction of its estimated remaining time ``rem / speed(n) - rem / speed(n + 1)`` per GPU,
   up to ``max_workers`` and while the gain is positive.
4. Placement keeps workers where they are: a shrinking job leaves the nodes where it has the
   fewest workers, a growing one fills its own nodes first, then the fullest nodes that fit.
Re-planned at arrivals, completions and, while elastic jobs are active, every ``tick_s`` (60 s,
Pollux's interval). Waiting jobs are kept in a sorted index (``policies/_index.py``), so a pass
costs O(changed + elastic jobs + GPUs x log jobs + started): rigid jobs cost nothing once placed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.job import JobSpec
from stint.placement.packing import in_order
from stint.policies._index import OrderIndex
from stint.policies.base import ClusterView, JobStatus, PerfModel, Phase, PolicyBase
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
        coef = nnls3(np.array(rows), np.array(ys))
        return SpeedModel(float(coef[0]), float(coef[1]), float(coef[2]))


def nnls3(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||a x - y|| over x >= 0, for a few columns: the least-squares solution on each
    subset of the columns (the others held at 0), the best of those that are non-negative.

    The problem is convex and its optimum is the unconstrained solution on its own support, so
    this is exact (SciPy's ``nnls`` gives the same point); with three columns it is 7 small
    solves, and it spares importing ``scipy.optimize`` (about 0.5 CPU-s) for Optimus runs.
    """
    best, best_res = np.zeros(a.shape[1]), float(np.sum(y * y))
    for mask in range(1, 1 << a.shape[1]):
        cols = [j for j in range(a.shape[1]) if mask >> j & 1]
        sol = np.linalg.lstsq(a[:, cols], y, rcond=None)[0]
        if (sol < 0).any():
            continue
        x = np.zeros(a.shape[1])
        x[cols] = sol
        res = float(np.sum((a @ x - y) ** 2))
        if res < best_res - 1e-15 * max(best_res, 1e-300):
            best, best_res = x, res
    return best


def _packed(n: int, per_node: int) -> Allocation:
    full, rest = divmod(n, per_node)
    nodes = dict.fromkeys(range(full), per_node)
    if rest:
        nodes[full] = rest
    return Allocation.of(nodes)


@register("optimus")
class Optimus(PolicyBase):
    """Greedy marginal-gain worker allocation (elastic jobs are resized, rigid ones start whole)."""

    name = "optimus"
    lazy_progress = True  # reads progress only through *_at(now)

    def __init__(self, tick_s: float = 60.0, max_skip: int = 64) -> None:
        self.tick_s: float | None = tick_s
        self.max_skip = max_skip
        self._models: dict[tuple[object, ...], SpeedModel] = {}
        self._perf: PerfModel | None = None
        self._per_node = 1
        self._index = OrderIndex(self._key)  # waiting jobs by estimated remaining time (rule 2)
        self._elastic: dict[str, None] = {}  # active jobs with min_workers < max_workers

    def model(self, spec: JobSpec) -> SpeedModel:
        key = (spec.application, spec.batch_size, spec.requested_workers, spec.min_workers, spec.max_workers)
        m = self._models.get(key)
        if m is None:
            assert self._perf is not None
            m = self._models[key] = SpeedModel.fit(self._perf, spec, self._per_node)
        return m

    def _key(self, st: JobStatus, now: float) -> tuple[float, float, str]:
        spec = st.spec
        rem = st.known_remaining_at(now) / max(self.model(spec).speed(spec.min_workers), 1e-12)
        return (rem, spec.arrival_s, st.job_id)

    def next_due(self) -> float | None:
        """Only elastic jobs gain from periodic re-planning; without them ticks are skipped."""
        return 0.0 if self._elastic else None

    def plan(self, view: ClusterView) -> Plan:
        self._perf = view.perf
        self._per_node = max(max(int(n.capacity.gpu) for n in view.cluster.nodes), 1)
        rebuild = self._index.needs_rebuild(view)
        self._index.sync(view)
        by_id = view.by_id if view.by_id is not None else {st.job_id: st for st in view.jobs}
        if rebuild:
            self._elastic = {st.job_id: None for st in view.jobs if st.spec.elastic}
        else:
            for jid in view.changed:
                found = by_id.get(jid)
                if found is not None and found.spec.elastic:
                    self._elastic[jid] = None
                else:
                    self._elastic.pop(jid, None)
        target = self._targets(view, by_id)
        return _place_targets(view, by_id, target, self._elastic)

    def _targets(self, view: ClusterView, by_id: Mapping[str, JobStatus]) -> dict[str, int]:
        # Rule 2: running jobs keep their minimum. Rigid running jobs hold exactly it, so only
        # elastic ones can give GPUs back to the pool.
        gpus_left = sum(view.free_gpus)
        target: dict[str, int] = {}
        for jid in self._elastic:
            st = by_id[jid]
            if st.phase is Phase.RUNNING:
                least = st.spec.feasible_counts()[0]
                target[jid] = least
                gpus_left += st.held_gpus - least * st.spec.gpus_per_worker
        skipped = 0
        for _, jid in self._index.waiting:  # then waiting jobs, shortest remaining first
            if gpus_left <= 0:
                break
            spec = by_id[jid].spec
            least = spec.feasible_counts()[0]
            need = least * spec.gpus_per_worker
            if need <= gpus_left:
                target[jid] = least
                gpus_left -= need
            else:
                skipped += 1
                if skipped > self.max_skip:
                    break
        heap: list[tuple[float, str]] = []
        for jid, n in target.items():
            if jid in self._elastic:
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
        for jid, n in target.items():  # counts grew one worker at a time: keep feasible ones
            target[jid] = by_id[jid].spec.largest_feasible(n)
        return target

    def _push_gain(self, view: ClusterView, heap: list[tuple[float, str]], st: JobStatus, n: int) -> None:
        spec = st.spec
        if n >= spec.max_workers:
            return
        m = self.model(spec)
        s0, s1 = m.speed(n), m.speed(n + 1)
        if s1 <= s0 or s0 <= 0:
            return
        rem = st.known_remaining_at(view.now)
        gain = (rem / s0 - rem / s1) / max(spec.gpus_per_worker, 1)
        heapq.heappush(heap, (-gain, st.job_id))


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
