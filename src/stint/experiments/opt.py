"""The exact offline optimum of OASiS' problem (1)-(10) as a MILP on HiGHS, for small instances.

Variables, for job i, worker host h, PS host k and slot t >= a_i: integer workers y[i,h,t] and
PSs z[i,k,t], and a binary u[i,t] = "job i's last slot is t" (x_i = Σ_t u[i,t] <= 1).
Maximise Σ_{i,t} f_i(t - a_i + 1 slots) u[i,t] subject to
(2) Σ_{h,t} y >= W_i x_i (worker-slots); (3) Σ_h y[i,h,t] <= N_i Σ_{t' >= t} u[i,t'] (also: no
work after the last slot); (4)/(5) per host, slot and resource; (6) b_i Σ_h y <= B_i Σ_k z;
(7) Σ_k z <= Σ_h y.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from stint.experiments.workload import Workload


@dataclass(frozen=True, slots=True)
class OptResult:
    utility: float  # best integer solution found
    bound: float  # HiGHS' dual bound: OPT <= bound
    optimal: bool


class _Rows:
    def __init__(self) -> None:
        self.r: list[int] = []
        self.c: list[int] = []
        self.v: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, coefs: list[tuple[int, float]], lo: float, hi: float) -> None:
        row = len(self.lo)
        for col, val in coefs:
            self.r.append(row)
            self.c.append(col)
            self.v.append(val)
        self.lo.append(lo)
        self.hi.append(hi)


def solve_opt(wl: Workload, time_limit_s: float = 60.0) -> OptResult:
    """Solve problem (1) for the workload exactly (or to the time limit)."""
    nodes = wl.cluster.nodes
    wh = [i for i, n in enumerate(nodes) if n.role != "ps"]
    ph = [i for i, n in enumerate(nodes) if n.role == "ps"]
    T, slot = wl.horizon, wl.slot_s
    col: dict[tuple[str, int, int, int], int] = {}

    def var(*key: object) -> int:
        return col.setdefault(key, len(col))  # type: ignore[arg-type]

    obj: dict[int, float] = {}
    upper: dict[int, float] = {}
    rows = _Rows()
    cap_terms: dict[tuple[int, int, int], list[tuple[int, float]]] = {}
    for i, s in enumerate(wl.jobs):
        a = round(s.arrival_s / slot)
        assert s.ps_demand is not None
        wd, sd = s.worker_demand.as_tuple(), s.ps_demand.as_tuple()
        for t in range(a, T):
            obj[var("u", i, t, 0)] = float(s.utility((t + 1) * slot - s.arrival_s))
            upper[var("u", i, t, 0)] = 1
        rows.add([(var("u", i, t, 0), 1.0) for t in range(a, T)], 0, 1)
        work = [(var("y", i, h, t), 1.0) for h in wh for t in range(a, T)]
        rows.add(work + [(var("u", i, t, 0), -s.work / slot) for t in range(a, T)], 0, np.inf)
        for t in range(a, T):
            ys = [(var("y", i, h, t), 1.0) for h in wh]
            zs = [(var("z", i, k, t), 1.0) for k in ph]
            later = [(var("u", i, t2, 0), -float(s.max_workers)) for t2 in range(t, T)]
            rows.add(ys + later, -np.inf, 0)  # (3) and nothing after the last slot
            b, B = s.worker_demand.net_gbps, s.ps_demand.net_gbps
            rows.add([(c, b) for c, _ in ys] + [(c, -B) for c, _ in zs], -np.inf, 0)  # (6)
            rows.add(zs + [(c, -1.0) for c, _ in ys], -np.inf, 0)  # (7)
            for h in wh:
                upper[var("y", i, h, t)] = s.max_workers
                for r in range(4):
                    if wd[r] > 0:
                        cap_terms.setdefault((h, t, r), []).append((var("y", i, h, t), wd[r]))
            for k in ph:
                upper[var("z", i, k, t)] = s.max_workers
                for r in range(4):
                    if sd[r] > 0:
                        cap_terms.setdefault((k, t, r), []).append((var("z", i, k, t), sd[r]))
    for (node, _t, r), terms in cap_terms.items():
        rows.add(terms, -np.inf, nodes[node].capacity.as_tuple()[r])  # (4)/(5)
    n = len(col)
    c = np.zeros(n)
    for j, v in obj.items():
        c[j] = -v
    ub = np.array([upper.get(j, 0.0) for j in range(n)])
    a_mat = coo_matrix((rows.v, (rows.r, rows.c)), shape=(len(rows.lo), n)).tocsr()
    res = milp(c, constraints=LinearConstraint(a_mat, rows.lo, rows.hi),
               integrality=np.ones(n), bounds=Bounds(np.zeros(n), ub),
               options={"time_limit": time_limit_s, "mip_rel_gap": 1e-4})
    if res.x is None:
        return OptResult(0.0, float("inf"), False)
    bound = -float(res.mip_dual_bound) if res.mip_dual_bound is not None else float("inf")
    return OptResult(-float(res.fun), bound, res.status == 0)



def isolated_bound(wl: Workload) -> float:
    """Σ_i f_i(shortest duration job i could have on the *empty* cluster): an upper bound on the
    total utility of any policy, used beside Fig. 3 to show how much room the baselines leave.

    Job i runs at most ``y_max`` workers at once: N_i, the workers that fit on the empty worker
    hosts, and the most whose PSs, min(⌈y b_i/B_i⌉, y) by (6)-(7), fit on the empty PS hosts.
    Its W_i worker-slots then take at least ⌈W_i / y_max⌉ slots; f is non-increasing, so f there
    bounds its utility under every schedule. Jobs that cannot run add 0.
    """
    from stint.policies.oasis import HostGroups, dp_job
    from stint.policies.oasis_core import HostPrices

    g = HostGroups.of(wl.cluster)
    flat = np.ones(4)
    wh = HostPrices(g.caps(wl.cluster, g.worker_nodes, g.worker_norm), 1.0, flat, 1)
    ph = HostPrices(g.caps(wl.cluster, g.ps_nodes, g.ps_norm), 1.0, flat, 1) if g.ps_nodes else None
    total = 0.0
    for spec in wl.jobs:
        a = math.ceil(spec.arrival_s / wl.slot_s - 1e-9)
        job = dp_job(spec, a, wl.horizon, wl.slot_s, g, max_quanta=1)
        if isinstance(job, str):
            continue
        ymax = min(job.max_workers, int(wh.room(0, 1, job.worker_demand).sum()))
        if ph is not None and job.ps_demand is not None:
            ys = np.arange(ymax + 1)
            ps_room = int(ph.room(0, 1, job.ps_demand).sum())
            ymax = int(ys[job.ps_for(ys) <= ps_room].max())
        if ymax <= 0:
            continue
        shortest = max(1, math.ceil(job.quantum_ws * job.quanta / ymax - 1e-9))
        if shortest <= len(job.utility):
            total += float(job.utility[shortest - 1])
    return total
