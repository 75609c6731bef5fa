"""Pollux (Qiao et al., OSDI'21) as a baseline: goodput-driven allocation with fairness knob p.

1. Goodput: a job's progress rate on n GPUs packed on the fewest nodes, ``perf.rate`` — with
   ``stint sim``'s adaptive batch (``ProfileModel(adaptive_batch=True)``, on by default for this
   policy) the job picks the batch size that maximises throughput x statistical efficiency on
   each allocation, so batch size and allocation are co-adapted as in Pollux.
2. Speedup: goodput on n GPUs over goodput on a fair share (the cluster's GPUs over the number of
   active jobs, at least one), scaled on a change of allocation by Pollux's re-allocation factor
   (age - restarts x delay) / (age + delay), the restart penalty.
3. Fitness: the generalised mean of the speedups with power ``p`` (default -1, Pollux's), as a sum
   of u(s) = s^p / p (log s for p = 0). Jobs get GPUs greedily: first one GPU each in arrival order
   (with p <= 0 a job without GPUs makes the fitness zero, so every job that can run gets one),
   then repeatedly the job and size step with the largest gain in u per GPU, over every step size
   (so a restart's penalty is weighed against the whole growth it buys, not one GPU at a time).
4. Placement moves as few workers as possible (``optimus._place_targets``).

Pollux's own optimiser is a genetic algorithm over allocation matrices. The greedy search here
optimises the same objective over GPU counts per job with consolidated placements; it is
deterministic and costs O(jobs x max GPUs x log jobs) per pass, where the genetic algorithm costs
generations x population x jobs and did not finish workload 6 in 17 minutes in Pollux's simulator.
Re-planned at arrivals, completions and every ``tick_s`` (60 s, Pollux's interval).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import numpy as np

from stint.model.allocation import Plan
from stint.model.job import JobSpec
from stint.perf.model import PerfModel
from stint.placement.packing import packed
from stint.policies.base import ClusterView, JobStatus, PolicyBase
from stint.policies.optimus import _place_targets
from stint.policies.registry import register


@register("pollux")
class Pollux(PolicyBase):
    """Goodput x fairness allocation over GPU counts (see the module docstring)."""

    name = "pollux"
    lazy_progress = True  # reads no progress at all

    def __init__(self, p: float = -1.0, restart_s: float = 30.0, tick_s: float = 60.0) -> None:
        self.p = p
        self.restart_s = restart_s
        self.tick_s: float | None = tick_s
        self._goodput: dict[tuple[object, ...], np.ndarray] = {}
        self._restarts: dict[str, int] = {}  # reallocations this policy ordered, per active job
        self._history: int | None = None

    def plan(self, view: ClusterView) -> Plan:
        by_id = view.by_id if view.by_id is not None else {st.job_id: st for st in view.jobs}
        if view.history is None or view.history != self._history:  # another run's jobs
            self._history, self._restarts = view.history, {}
        jobs = [st for st in view.jobs if st.spec.gpus_per_worker == 1]
        if not jobs:
            return Plan()
        # GPUs this policy may hand out: the free ones and those its jobs hold (not down nodes').
        pool = sum(view.free_gpus) + sum(st.held_gpus for st in jobs)
        per_node = max(max(int(n.capacity.gpu) for n in view.cluster.nodes), 1)
        fair = max(1, pool // len(jobs))
        utilities = {st.job_id: self._utilities(view, st, self._curve(view.perf, st.spec, pool, per_node), fair)
                     for st in jobs}
        target = _greedy(jobs, utilities, pool)
        for jid, n in target.items():  # sized by GPU counts: keep the ones a job can run on
            target[jid] = by_id[jid].spec.largest_feasible(n)
        plan = _place_targets(view, by_id, target, {st.job_id: None for st in jobs})
        for jid in plan.allocations:
            if by_id[jid].allocation:
                self._restarts[jid] = self._restarts.get(jid, 0) + 1
        for jid in view.changed:
            if jid not in by_id:
                self._restarts.pop(jid, None)
        return plan

    def _curve(self, perf: PerfModel, spec: JobSpec, pool: int, per_node: int) -> np.ndarray:
        """Goodput on 0..max GPUs packed on the fewest nodes, 0 below the job's minimum (cached
        per kind of job)."""
        top = min(pool, spec.max_workers)
        key = (spec.application, spec.batch_size, spec.work, spec.min_workers, top, per_node)
        got = self._goodput.get(key)
        if got is None:
            rates = [perf.rate(spec, packed(n, per_node)) if n >= spec.min_workers else 0.0 for n in range(1, top + 1)]
            got = self._goodput[key] = np.array([0.0, *rates])
        return got

    def _utilities(self, view: ClusterView, st: JobStatus, curve: np.ndarray, fair: int) -> np.ndarray:
        """u(speedup) on 0..max GPUs: speedup over the fair share, with the restart penalty on
        every size but the one a running job holds; -inf where the job cannot run."""
        base = curve[min(fair, len(curve) - 1)] or curve.max()
        speedup = curve / base if base > 0 else np.zeros_like(curve)
        have = st.allocation.num_workers
        if have:
            age = max(view.now - st.spec.arrival_s, 0.0)
            restarts = self._restarts.get(st.job_id, 0) + 1
            factor = max(0.0, (age - restarts * self.restart_s) / (age + self.restart_s))
            held = speedup[have] if have < len(speedup) else 0.0
            speedup = speedup * factor
            if have < len(speedup):
                speedup[have] = held
        with np.errstate(divide="ignore"):
            if self.p == 0:
                u = np.log(speedup)
            else:
                u = np.where(speedup > 0, np.power(np.maximum(speedup, 1e-300), self.p) / self.p, -np.inf)
        return np.asarray(u, dtype=float)


def _greedy(jobs: list[JobStatus], utilities: Mapping[str, np.ndarray], pool: int) -> dict[str, int]:
    """Minimum sizes in arrival order, then the best step (gain in utility per GPU) at a time."""
    left = pool
    target: dict[str, int] = {}
    for st in sorted(jobs, key=lambda s: (s.spec.arrival_s, s.job_id)):
        need = st.spec.min_workers
        u = utilities[st.job_id]
        if need <= left and need < len(u) and np.isfinite(u[need:]).any():  # it can run at some size
            target[st.job_id] = need
            left -= need
    heap: list[tuple[float, int, str]] = []

    def push(jid: str) -> None:
        n, u = target[jid], utilities[jid]
        top = min(len(u) - 1, n + left)
        if top <= n:
            return
        if not np.isfinite(u[n]):  # e.g. a young job's restart penalty: first reach a size it can use
            reachable = np.flatnonzero(np.isfinite(u[n + 1 : top + 1]))
            if reachable.size:
                heapq.heappush(heap, (-np.inf, int(reachable[0]) + 1, jid))
            return
        gains = (u[n + 1 : top + 1] - u[n]) / np.arange(1, top - n + 1)
        k = int(np.argmax(gains))
        if gains[k] > 0:
            heapq.heappush(heap, (-float(gains[k]), k + 1, jid))

    for jid in target:
        push(jid)
    while heap and left > 0:
        _, step, jid = heapq.heappop(heap)
        if step > left:
            push(jid)  # re-evaluate with what is left
            continue
        target[jid] += step
        left -= step
        push(jid)
    return target
