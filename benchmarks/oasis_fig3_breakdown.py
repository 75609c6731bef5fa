"""Where each policy earns its Fig. 3 utility: per job class, plus offered load and starvation.

Usage: .venv/bin/python benchmarks/oasis_fig3_breakdown.py [--seeds 3] [--loads 300 400]
                                                         [--policies oasis drf-ps dorm]

Per load, printed (mean over seeds): the offered load (Σ_i work_i · demand_i^r over T slots of
the host group's capacity, for the busiest resource r of worker and of PS hosts), then per policy
and class the utility, jobs finished and jobs in the class; and for the re-allocating baselines
at each re-allocation (mean over them): the share of active jobs holding no worker (starved;
for OASiS this includes admitted jobs whose plan starts later), the GPUs left free on worker
hosts, and how many of the 0-worker jobs could still place one worker on what is free (their
PS not checked).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

import numpy as np

from stint.experiments.oasis_figs import build_policy
from stint.experiments.slot_eval import evaluate
from stint.experiments.workload import CLASSES, Workload, make_workload
from stint.model.allocation import Plan
from stint.placement.round_robin import FreeCapacity, demand
from stint.policies.base import ClusterView, Policy, PolicyBase


class Probe(PolicyBase):
    """Wraps a policy; at each re-allocation records the share of active jobs with 0 workers,
    the free GPUs on worker hosts, and how many 0-worker jobs could still place one worker."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.tick_s = inner.tick_s
        self.lazy_progress = inner.lazy_progress
        self.starved: list[float] = []
        self.idle_gpus: list[float] = []
        self.fits: list[int] = []

    def plan(self, view: ClusterView) -> Plan:
        plan = self.inner.plan(view)
        if view.changed and view.jobs:
            live = [st for st in view.jobs if st.job_id not in plan.reject]
            allocs = {st.job_id: plan.allocations.get(st.job_id, st.allocation) for st in live}
            free = FreeCapacity(view.cluster)
            for st in live:
                free.take(st.spec, allocs[st.job_id])
            zero = [st for st in live if not allocs[st.job_id]]
            rows = free.free[free.hosts[False]]
            self.starved.append(len(zero) / len(view.jobs))
            self.idle_gpus.append(float(rows[:, 0].sum()))
            self.fits.append(sum(bool((rows + 1e-9 >= demand(st.spec)).all(axis=1).any())
                                 for st in zero))
        return plan


def offered_load(wl: Workload) -> tuple[float, float]:
    """Busiest resource's demand over T slots ÷ capacity, for worker and PS hosts."""
    cap = {ps: np.sum([n.capacity.as_tuple() for n in wl.cluster.nodes
                       if (n.role == "ps") == ps], axis=0) for ps in (False, True)}
    need = {False: np.zeros(4), True: np.zeros(4)}
    for s in wl.jobs:
        need[False] += s.work * np.array(s.worker_demand.as_tuple())
        if s.ps_demand is not None:
            need[True] += s.work * s.ps_per_worker * np.array(s.ps_demand.as_tuple())
    horizon_s = wl.horizon * wl.slot_s
    w, p = (float(np.max(np.divide(need[g], cap[g] * horizon_s, out=np.zeros(4),
                                   where=cap[g] > 0))) for g in (False, True))
    return w, p


def run(policy: str, seed: int, jobs: int) -> dict[str, Any]:
    wl = make_workload(seed, jobs)
    probe = Probe(build_policy(policy, wl))
    res = evaluate(probe, wl.cluster, wl.jobs, wl.horizon, wl.slot_s)
    out: dict[str, Any] = {k: float(np.mean(v)) if v else 0.0 for k, v in (
        ("starved", probe.starved), ("idle_gpus", probe.idle_gpus), ("fits", probe.fits))}
    for cls in CLASSES:
        os_ = [o for o in res.outcomes.values() if wl.classes[o.job_id] == cls]
        out[cls] = (sum(o.utility for o in os_), sum(o.finish_slot is not None for o in os_),
                    len(os_))
    out["total"] = res.total_utility
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--loads", type=int, nargs="+", default=[300, 400])
    ap.add_argument("--policies", nargs="+", default=["oasis", "drf-ps", "dorm"])
    args = ap.parse_args()
    for n in args.loads:
        loads = np.array([offered_load(make_workload(s, n)) for s in range(1, args.seeds + 1)])
        print(f"\n{n} jobs: offered load worker hosts {loads[:, 0].mean():.2f}, "
              f"PS hosts {loads[:, 1].mean():.2f} (x capacity over T)")
        print("| policy | total | " + " | ".join(f"{c}: utility, finished/jobs"
                                                  for c in CLASSES)
              + " | starved | idle GPUs | 0-worker jobs a worker fits |")
        for p in args.policies:
            rows = [run(p, s, n) for s in range(1, args.seeds + 1)]
            agg: dict[str, Any] = defaultdict(float)
            for r in rows:
                for k, v in r.items():
                    agg[k] = np.add(agg[k], v) if isinstance(v, tuple) else agg[k] + v
            m = len(rows)
            cells = [f"{agg[c][0] / m:.0f}, {agg[c][1] / m:.0f}/{agg[c][2] / m:.0f}"
                     for c in CLASSES]
            print(f"| {p} | {agg['total'] / m:.0f} | " + " | ".join(cells)
                  + f" | {agg['starved'] / m:.2f} | {agg['idle_gpus'] / m:.1f}"
                  f" | {agg['fits'] / m:.1f} |", flush=True)


if __name__ == "__main__":
    main()
