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
4. Placement as Optimus: moves as few workers as possible (``optimus._place_targets``).

Pollux's own optimiser is a genetic algorithm over allocation matrices. The greedy search here
optimises the same objective over GPU counts per job with consolidated placements; it is
deterministic and costs O(jobs x max GPUs x log jobs) per pass, where the genetic algorithm costs
generations x population x jobs and did not finish workload 6 in 17 minutes in Pollux's simulator.
Re-planned at arrivals, completions and every ``tick_s`` (60 s, Pollux's interval).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

from stint.model.allocation import Plan
from stint.model.job import JobSpec
from stint.policies.base import ClusterView, JobStatus, PerfModel
from stint.policies.optimus import _packed, _place_targets
from stint.policies.registry import register


@register("pollux")
class Pollux:
    """Goodput x fairness allocation over GPU counts (see the module docstring)."""

    name = "pollux"
    lazy_progress = True  # reads no progress at all

    def __init__(self, p: float = -1.0, restart_s: float = 30.0, tick_s: float = 60.0) -> None:
        self.p = p
        self.restart_s = restart_s
        self.tick_s: float | None = tick_s
        self._goodput: dict[tuple[object, ...], list[float]] = {}
        self._restarts: dict[str, int] = {}  # reallocations this policy ordered, per active job
        self._stream: int | None = None

    def plan(self, view: ClusterView) -> Plan:
        by_id = view.by_id if view.by_id is not None else {st.job_id: st for st in view.jobs}
        if view.stream is None or view.stream != self._stream:
            self._stream, self._restarts = view.stream, {}
        total = sum(int(n.capacity.gpu) for n in view.cluster.nodes)
        per_node = max(max(int(n.capacity.gpu) for n in view.cluster.nodes), 1)
        jobs = [st for st in view.jobs if st.spec.gpus_per_worker == 1]
        if not jobs:
            return Plan()
        fair = max(1, total // len(jobs))
        curves = {st.job_id: self._curve(view.perf, st.spec, min(total, st.spec.max_workers), per_node) for st in jobs}
        target = self._targets(view, jobs, curves, fair, total)
        plan = _place_targets(view, by_id, target, {st.job_id: None for st in jobs})
        for jid in plan.allocations:
            if by_id[jid].allocation:
                self._restarts[jid] = self._restarts.get(jid, 0) + 1
        for jid in view.changed:
            if jid not in by_id:
                self._restarts.pop(jid, None)
        return plan

    def _curve(self, perf: PerfModel, spec: JobSpec, top: int, per_node: int) -> list[float]:
        """Goodput on 0..top GPUs packed on the fewest nodes (cached per kind of job)."""
        key = (spec.application, spec.batch_size, spec.work, top, per_node)
        got = self._goodput.get(key)
        if got is None:
            got = self._goodput[key] = [0.0] + [perf.rate(spec, _packed(n, per_node)) for n in range(1, top + 1)]
        return got

    def _utility(self, s: float) -> float:
        if s <= 0:
            return -math.inf
        return math.log(s) if self.p == 0 else s**self.p / self.p

    def _targets(
        self, view: ClusterView, jobs: list[JobStatus], curves: Mapping[str, list[float]], fair: int, total: int
    ) -> dict[str, int]:
        def util(st: JobStatus, n: int) -> float:
            curve = curves[st.job_id]
            base = curve[min(fair, len(curve) - 1)]
            s = curve[n] / base if base > 0 else 0.0
            have = st.allocation.num_workers
            if have and n != have:  # a restart: Pollux's re-allocation factor
                age = max(view.now - st.spec.arrival_s, 0.0)
                restarts = self._restarts.get(st.job_id, 0) + 1
                s *= max(0.0, (age - restarts * self.restart_s) / (age + self.restart_s))
            return self._utility(s)

        left = total
        target: dict[str, int] = {}
        for st in sorted(jobs, key=lambda s: (s.spec.arrival_s, s.job_id)):
            if left <= 0:
                break
            if len(curves[st.job_id]) > 1:
                target[st.job_id] = 1
                left -= 1
        heap: list[tuple[float, int, str]] = []
        by_id = {st.job_id: st for st in jobs}

        def push(st: JobStatus) -> None:
            n = target[st.job_id]
            top = min(len(curves[st.job_id]) - 1, n + left)
            now_u = util(st, n)
            best, step = 0.0, 0
            for k in range(1, top - n + 1):
                gain = (util(st, n + k) - now_u) / k if now_u > -math.inf else math.inf
                if gain > best:
                    best, step = gain, k
            if step:
                heapq.heappush(heap, (-best, step, st.job_id))

        for jid in target:
            push(by_id[jid])
        while heap and left > 0:
            _, step, jid = heapq.heappop(heap)
            if step > left:
                push(by_id[jid])  # re-evaluate with what is left
                continue
            target[jid] += step
            left -= step
            push(by_id[jid])
        return target

