"""Gavel (Narayanan et al., OSDI'20): heterogeneity-aware max-min fairness over effective throughput.

1. Throughput matrix: ``T[j, t]``, job j's rate alone at its requested size packed on type t
   (``perf.rate``: on a typed cluster the per-type speeds, ``perf.types``); 0 where it may not run.
2. Allocation: ``X[j, t]``, the share of time job j should spend on type t, from the paper's LP
   (SciPy's HiGHS, ``linprog(method="highs")``):

       maximise  min_j  n_j (sum_t T[j, t] X[j, t]) / (w_j * E_j)
       s.t.      sum_t X[j, t] <= 1                  (a job runs on one type at a time)
                 sum_j n_j X[j, t] <= G_t            (type t's GPUs; n_j the job's GPUs)
                 0 <= X[j, t]

   where ``E_j`` is the job's throughput under an equal share (each type's time shared equally
   by the jobs: ``sum_t T[j, t] * min(1, G / sum_k n_k) * G_t / G``) and ``w_j`` its priority
   weight. The factor ``n_j`` is Gavel's own (its ``MaxMinFairnessPolicyWithPerf`` multiplies by
   the scale factor): a job on one GPU gets n_j times the time of a job on n_j GPUs of equal
   throughput. As the max-min optimum leaves non-bottleneck jobs' shares undetermined, a second LP
   keeps the minimum (to 1e-6) and maximises the total normalised throughput.
3. Rounds (``tick_s``, 360 s as the paper's rounds; an arrival or completion within a round
   only fills what is free, running jobs keep their type until the round ends): each (job,
   type) has the priority
   ``X[j, t] / f[j, t]``, with ``f`` the share of its time in the system it has run on t
   (infinite before it has run there); pairs are taken in priority order, each job placed on at
   most one type while that type has room (a job that stays on its type keeps its nodes).
   Capacity left after that goes to the jobs without a type this round, by priority: the round
   is work-conserving.
"""

from __future__ import annotations

import math

import numpy as np

from stint.model.allocation import Plan
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


@register("gavel")
class Gavel(TypeAware):
    """Max-min fairness over effective throughput, enacted in rounds (see the module docstring)."""

    name = "gavel"
    lazy_progress = True  # reads no progress

    def __init__(self, tick_s: float = 360.0) -> None:
        self.tick_s: float | None = tick_s
        self._received: dict[str, dict[str, float]] = {}  # job -> type -> seconds run there
        self._last: float | None = None
        self._history: int | None = None
        self._round_end = -math.inf  # a new round's assignment is due from here on

    def plan(self, view: ClusterView) -> Plan:
        if view.history is None or view.history != self._history:
            self._history, self._received, self._last = view.history, {}, None
            self._round_end = -math.inf
        self._account(view)
        new_round = view.now >= self._round_end - 1e-9
        if new_round and self.tick_s:
            self._round_end = view.now + self.tick_s
        jobs = list(view.jobs)
        if not jobs:
            return Plan()
        cluster = view.cluster
        types = list(cluster.types) or [""]
        cap = capacity(view)
        gpus = type_gpus(cluster, cap) if cluster.typed else {"": sum(cap)}
        T = np.array([[self._rate(view, st, t) for t in types] for st in jobs])
        plan = Plan()
        runnable = [i for i, st in enumerate(jobs) if T[i].max() > 0]
        for i, st in enumerate(jobs):
            if T[i].max() <= 0:
                plan.reject[st.job_id] = (f"its {st.spec.requested_workers * st.spec.gpus_per_worker} GPUs fit on "
                                          "no accelerator type it may run on")
        if not runnable:
            return plan
        sub = [jobs[i] for i in runnable]
        X = max_min_shares(T[runnable], np.array([st.spec.requested_workers * st.spec.gpus_per_worker for st in sub],
                                                 dtype=float),
                           np.array([gpus[t] for t in types], dtype=float),
                           np.array([max(st.spec.priority, 1e-9) for st in sub]))
        targets = self._rounds(view, sub, X, T[runnable], types, gpus, new_round)
        placed = place_targets(view, sub, targets)
        placed.reject.update(plan.reject)
        return placed

    def _rate(self, view: ClusterView, st: JobStatus, t: str) -> float:
        return rate_on(view.perf, view.cluster, st.spec, t, st.spec.requested_workers)

    def _account(self, view: ClusterView) -> None:
        """Add the time since the last call to each running job's type."""
        if self._last is not None and view.now > self._last:
            dt = view.now - self._last
            for st in view.jobs:
                got = target_of(view.cluster, st)
                if got is not None:
                    row = self._received.setdefault(st.job_id, {})
                    row[got[0]] = row.get(got[0], 0.0) + dt
        self._last = view.now
        for jid in view.changed:
            if view.by_id is not None and jid not in view.by_id:
                self._received.pop(jid, None)

    def _rounds(self, view: ClusterView, jobs: list[JobStatus], X: np.ndarray, T: np.ndarray,
                types: list[str], gpus: dict[str, int], new_round: bool) -> dict[str, Target]:
        """Each job's type for this round by priority ``X / f`` (module docstring, 3). Within a
        round (an arrival or a completion before its end) running jobs keep their type and the
        waiting ones share what is free, in the same order."""
        pairs: list[tuple[float, float, float, str, int, int]] = []
        for j, st in enumerate(jobs):
            age = max(view.now - st.spec.arrival_s, 1.0)
            got = self._received.get(st.job_id, {})
            for k, t in enumerate(types):
                if T[j, k] <= 0:
                    continue
                share = got.get(t, 0.0) / age
                prio = X[j, k] / share if share > 0 else (math.inf if X[j, k] > 1e-9 else 0.0)
                pairs.append((-prio, -X[j, k], st.spec.arrival_s, st.job_id, j, k))
        pairs.sort()
        left = dict(gpus)
        targets: dict[str, Target] = {}
        if not new_round:
            for st in jobs:
                held = target_of(view.cluster, st)
                if held is not None:
                    targets[st.job_id] = held
                    left[held[0]] -= held[1] * st.spec.gpus_per_worker
        for wanted in (True, False):  # the LP's pairs first, then the leftover capacity
            for _, negx, _, jid, j, k in pairs:
                if jid in targets or (wanted and -negx <= 1e-9):
                    continue
                st, t = jobs[j], types[k]
                need = st.spec.requested_workers * st.spec.gpus_per_worker
                if need <= left[t]:
                    targets[jid] = (t, st.spec.requested_workers)
                    left[t] -= need
        return targets


def max_min_shares(T: np.ndarray, need: np.ndarray, gpus: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The LP of the module docstring (2): ``X`` (jobs x types) for throughputs ``T``, the jobs'
    GPUs ``need``, the types' GPUs ``gpus`` and the jobs' priority weights."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, vstack

    J, K = T.shape
    total = max(float(gpus.sum()), 1.0)
    equal = min(1.0, total / max(float(need.sum()), 1.0)) * gpus / total
    E = np.maximum(T @ equal, 1e-12)
    A = T * (need / (E * weight))[:, None]  # normalised throughput per unit of share, x its GPUs
    nx = J * K
    rows, cols, vals = [], [], []
    for j in range(J):  # z - sum_t A[j, t] x[j, t] <= 0
        for k in range(K):
            rows.append(j)
            cols.append(j * K + k)
            vals.append(-A[j, k])
        rows.append(j)
        cols.append(nx)
        vals.append(1.0)
    fair = coo_matrix((vals, (rows, cols)), shape=(J, nx + 1))
    one = coo_matrix((np.ones(nx), (np.repeat(np.arange(J), K), np.arange(nx))), shape=(J, nx + 1))
    cap = coo_matrix((np.repeat(need, K), (np.tile(np.arange(K), J), np.arange(nx))), shape=(K, nx + 1))
    A_ub = vstack([fair, one, cap]).tocsr()
    b_ub = np.concatenate([np.zeros(J), np.ones(J), gpus])
    bounds = [(0.0, 1.0 if T[j, k] > 0 else 0.0) for j in range(J) for k in range(K)] + [(0.0, None)]
    c = np.zeros(nx + 1)
    c[nx] = -1.0
    first = linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if first.status != 0:
        return np.zeros((J, K))
    z = float(first.x[nx])
    bounds[-1] = (z * (1 - 1e-6), None)
    c2 = np.concatenate([-(T / E[:, None]).ravel(), [0.0]])
    second = linprog(c2, A_ub=A_ub, b_ub=b_ub, bounds=bounds, method="highs")
    x = second.x if second.status == 0 else first.x
    return np.asarray(x[:nx], dtype=float).reshape(J, K)
