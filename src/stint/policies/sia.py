"""Sia (Jayaram Subramanya et al., SOSP'23): goodput-optimising allocation over types and counts.

1. Configurations: for each job, each type it may run on and each count it can run on there --
   powers of two up to one node's GPUs, then whole nodes, up to its maximum (a rigid job: its
   requested count only). A running job's configurations on another type than its own keep its
   count (a resize stays on its type; a move to another type is a migration).
2. Goodput ``G[j, c]``: the job's rate alone on configuration c (``perf.rate`` on the count packed
   on the type's fewest nodes; with Pollux's job model and adaptive batches, goodput as Pollux
   defines it, scaled per type by ``perf.types``), normalised by the job's smallest positive
   goodput: ``S[j, c] = G[j, c] / min_c G[j, c]`` (>= 1). On a configuration other than the one
   it holds, a running job's ``S`` is multiplied by Pollux's re-allocation factor
   ``(age - restarts x restart_s) / (age + restart_s)`` (1 while it is younger than restart_s).
3. The ILP (SciPy's ``milp``, HiGHS branch and bound, ``time_limit_s``):

       minimise  sum_{j,c} x[j, c] * S[j, c]^p  +  lambda_n * sum_j (1 - sum_c x[j, c])
       s.t.      sum_c x[j, c] <= 1                       (one configuration per job)
                 sum_{j,c on t} n_c x[j, c] <= G_t        (type t's GPUs)
                 x[j, c] in {0, 1}

   with ``p`` = -0.5 (fairness: the gain of more goodput shrinks as it grows) and ``lambda_n`` =
   1.1 (a job left without GPUs costs more than any configuration, so every job that fits gets
   one), the defaults of Sia's simulator.
4. Placement: ``_typed_targets.place_targets``. Re-planned at arrivals, completions and every
   ``tick_s`` (60 s, Sia's round).
"""

from __future__ import annotations

import numpy as np

from stint.model.allocation import Plan
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.policies._typed_targets import (
    Target,
    capacity,
    place_targets,
    rate_on,
    target_of,
    type_gpus,
)
from stint.policies.base import ClusterView, JobStatus
from stint.policies.registry import register
from stint.policies.typed import TypeAware


@register("sia")
class Sia(TypeAware):
    """Goodput over (type, count) configurations, one ILP per round (see the module docstring)."""

    name = "sia"
    lazy_progress = True  # reads no progress

    def __init__(self, p: float = -0.5, lambda_n: float = 1.1, restart_s: float = 30.0,
                 tick_s: float = 60.0, time_limit_s: float = 10.0) -> None:
        if p >= 0:
            raise ValueError(f"p must be negative (got {p:g})")
        self.p, self.lambda_n, self.restart_s = p, lambda_n, restart_s
        self.tick_s: float | None = tick_s
        self.time_limit_s = time_limit_s
        self._restarts: dict[str, int] = {}
        self._history: int | None = None
        self._goodput: dict[tuple[object, ...], float] = {}

    def plan(self, view: ClusterView) -> Plan:
        if view.history is None or view.history != self._history:
            self._history, self._restarts = view.history, {}
        jobs = list(view.jobs)
        if not jobs:
            return Plan()
        cluster = view.cluster
        types = list(cluster.types) or [""]
        gpus = type_gpus(cluster, capacity(view)) if cluster.typed else {"": sum(capacity(view))}
        configs: list[tuple[int, Target, float]] = []  # (job index, (type, count), cost coefficient)
        plan = Plan()
        for j, st in enumerate(jobs):
            mine = self._configs(view, st, types, gpus)
            if not mine:
                plan.reject[st.job_id] = (f"its {st.spec.min_workers * st.spec.gpus_per_worker}+ GPUs fit on no "
                                          "accelerator type it may run on")
            configs += [(j, c, cost) for c, cost in mine]
        chosen = self._solve(jobs, configs, types, gpus) if configs else {}
        placed = place_targets(view, [st for st in jobs if st.job_id not in plan.reject], chosen)
        for jid in placed.allocations:
            if view.by_id is not None and jid in view.by_id and view.by_id[jid].allocation:
                self._restarts[jid] = self._restarts.get(jid, 0) + 1
        placed.reject.update(plan.reject)
        return placed

    def _configs(self, view: ClusterView, st: JobStatus, types: list[str], gpus: dict[str, int]
                 ) -> list[tuple[Target, float]]:
        """The job's configurations with their cost ``S^p - lambda_n`` (module docstring)."""
        cluster, spec = view.cluster, st.spec
        held = target_of(cluster, st)
        cands: list[tuple[Target, float]] = []
        for t in types:
            for n in counts(cluster, spec, t, gpus[t]):
                if held is not None and t != held[0] and n != held[1]:
                    continue  # a resize stays on its type; a move to another type keeps the count
                g = self._rate(view, spec, t, n)
                if g > 0:
                    cands.append(((t, n), g))
        if not cands:
            return []
        low = min(g for _, g in cands)
        age = max(view.now - spec.arrival_s, 0.0)
        factor = 1.0
        if held is not None and age >= self.restart_s:
            lost = (self._restarts.get(st.job_id, 0) + 1) * self.restart_s
            factor = max(age - lost, 0.0) / (age + self.restart_s)
        out = []
        for c, g in cands:
            s = g / low * (1.0 if held is None or c == held else factor)
            out.append((c, max(s, 1e-3) ** self.p - self.lambda_n))
        return out

    def _rate(self, view: ClusterView, spec: JobSpec, t: str, n: int) -> float:
        key = (spec.application, spec.batch_size, spec.work, spec.requested_workers, spec.gpu_types, t, n)
        got = self._goodput.get(key)
        if got is None:
            if len(self._goodput) > 100_000:
                self._goodput.clear()
            got = self._goodput[key] = rate_on(view.perf, view.cluster, spec, t, n)
        return got

    def _solve(self, jobs: list[JobStatus], configs: list[tuple[int, Target, float]], types: list[str],
               gpus: dict[str, int]) -> dict[str, Target]:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix

        m = len(configs)
        c = np.array([cost for _, _, cost in configs])
        col = np.arange(m)
        one = coo_matrix((np.ones(m), ([j for j, _, _ in configs], col)), shape=(len(jobs), m))
        k_of = {t: k for k, t in enumerate(types)}
        gpw = [jobs[j].spec.gpus_per_worker for j, _, _ in configs]
        cap = coo_matrix(([n * g for (_, (_, n), _), g in zip(configs, gpw, strict=True)],
                          ([k_of[t] for _, (t, _), _ in configs], col)), shape=(len(types), m))
        cons = [LinearConstraint(one.tocsr(), -np.inf, 1.0),
                LinearConstraint(cap.tocsr(), -np.inf, np.array([gpus[t] for t in types], dtype=float))]
        res = milp(c, constraints=cons, integrality=np.ones(m), bounds=Bounds(0, 1),
                   options={"time_limit": self.time_limit_s})
        if res.x is None:
            return {}
        return {jobs[j].job_id: cfg for (j, cfg, _), x in zip(configs, res.x, strict=True) if x > 0.5}


def counts(cluster: Cluster, spec: JobSpec, gpu_type: str, type_gpus: int) -> list[int]:
    """Worker counts Sia considers for the job on a type (module docstring, 1)."""
    gpw = max(spec.gpus_per_worker, 1)
    top = min(spec.max_workers, type_gpus // gpw)
    if not spec.elastic:
        return [spec.requested_workers] if spec.requested_workers <= top else []
    nodes = cluster.nodes_of(gpu_type) if cluster.typed else range(cluster.num_nodes)
    per_node = max((int(cluster.nodes[i].capacity.gpu) // gpw for i in nodes), default=1)
    out = set()
    n = 1
    while n <= min(per_node, top):
        out.add(n)
        n *= 2
    out.update(range(per_node, top + 1, max(per_node, 1)))
    if spec.requested_workers <= top:
        out.add(spec.requested_workers)
    return sorted(x for x in out if spec.can_run_on(x))
