"""OASiS vs OASiS with re-planning (``oasis-replan``), with and without mechanism costs.

Usage: .venv/bin/python benchmarks/oasis_replan.py [--seeds 3] [--processes 2]

Fig. 3 workloads (T = 300, H = K = 50). ``change cost`` is charged by the slot evaluator to every
job that already ran and whose allocation changes (resize, migration, resume): it makes no
progress for that many seconds of the slot. 0 is the paper's assumption; 300 s is a checkpoint
round trip of a large model (Singularity's tables: tens of seconds to minutes); 1800 s is half a
slot. Printed: total utility (mean ± std over seeds), replans per run, and seconds per run.

With ``--baselines`` DRF and Dorm run on the same workloads *under the same change cost* (they
resize at every arrival and completion, so the evaluator charges them too), and the last column
compares oasis-replan with the better of the two: the question is not only whether re-planning
beats OASiS, but whether it beats the re-allocating baselines once changes cost something.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from stint.experiments.oasis_figs import build_policy
from stint.experiments.slot_eval import evaluate
from stint.experiments.workload import make_workload


def run(args: tuple[str, int, int, float]) -> tuple[str, int, int, float, float, int, float]:
    name, seed, jobs, cost = args
    wl = make_workload(seed, jobs)
    params = {"change_cost_s": cost} if name == "oasis-replan" else {"redecide_overrun": False}
    pol = build_policy(name, wl, **params)
    t0 = time.perf_counter()
    res = evaluate(pol, wl.cluster, wl.jobs, wl.horizon, wl.slot_s, change_cost_s=cost)
    return (name, seed, jobs, cost, res.total_utility, getattr(pol, "replans", 0),
            time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--baselines", action="store_true", help="also DRF and Dorm, same costs")
    args = ap.parse_args()
    names = ("oasis", "oasis-replan") + (("drf-ps", "dorm") if args.baselines else ())
    tasks = [(p, s, n, c) for n in (100, 200) for c in (0.0, 300.0, 1800.0)
             for p in sorted(names, key=lambda p: p != "dorm")  # slowest first
             for s in range(1, args.seeds + 1)]
    with ProcessPoolExecutor(args.processes) as pool:
        rows = list(pool.map(run, tasks))
    head = " ".join(f"{p:>14}" for p in names)
    print(f"{'jobs':>4} {'cost s':>6} {head} {'replan÷oasis':>12}"
          + (f" {'replan÷best base':>16}" if args.baselines else "")
          + f" {'replans':>7} {'s/run':>11}")
    for n in (100, 200):
        for c in (0.0, 300.0, 1800.0):
            got = {p: [r for r in rows if r[0] == p and r[2] == n and r[3] == c] for p in names}
            u = {p: np.array([r[4] for r in v]) for p, v in got.items()}
            cells = " ".join(f"{u[p].mean():7.0f} ± {u[p].std():4.0f}" for p in names)
            secs = "/".join(f"{np.mean([r[6] for r in got[p]]):.0f}" for p in names)
            line = f"{n:4d} {c:6.0f} {cells} {u['oasis-replan'].mean() / u['oasis'].mean():12.2f}"
            if args.baselines:
                best = max(u["drf-ps"].mean(), u["dorm"].mean())
                line += f" {u['oasis-replan'].mean() / best:16.2f}"
            print(line + f" {np.mean([r[5] for r in got['oasis-replan']]):7.0f} {secs:>11}")


if __name__ == "__main__":
    main()
