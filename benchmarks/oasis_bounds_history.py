"""Sensitivity: OASiS with U and L fixed from a *past* workload of fixed size, at every load.

Usage: .venv/bin/python benchmarks/oasis_bounds_history.py [--seeds 5] [--history 100]

By default (Fig. 3) U and L are estimated from the evaluated workload itself, and L in (26) is a
minimum over jobs, so it falls as the workload grows (docs/oasis.md, "Second pass"). Here they
are estimated once from another workload of ``--history`` jobs (seed + 1000, same generator and
cluster) and then fixed, so prices do not depend on the load being evaluated. Printed: OASiS'
total utility per load, default vs fixed-history bounds (mean ± std over seeds), and both
divided by the best baseline's mean from a Fig. 3 seeds CSV if given (``--fig3-seeds``).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from stint.experiments.oasis_figs import LOADS, build_policy
from stint.experiments.oasis_report import read_fig3_seeds
from stint.experiments.slot_eval import evaluate
from stint.experiments.workload import make_workload
from stint.policies import make


def run(args: tuple[str, int, int, int]) -> tuple[str, int, float]:
    variant, seed, jobs, history = args
    wl = make_workload(seed, jobs)
    if variant == "default":
        pol = build_policy("oasis", wl)
    else:
        past = make_workload(seed + 1000, history)
        probe = make("oasis", slot_s=wl.slot_s, end_slot=wl.horizon, history=past.jobs)
        probe.setup(wl.cluster)  # normalised against the cluster it will run on
        pol = make("oasis", slot_s=wl.slot_s, end_slot=wl.horizon,
                   bounds=probe.estimator.bounds())
    res = evaluate(pol, wl.cluster, wl.jobs, wl.horizon, wl.slot_s)
    return variant, jobs, res.total_utility


def best_baseline(path: str) -> dict[int, float]:
    """Per load, the highest mean total of the baselines in a Fig. 3 seeds CSV."""
    loads, _, fig = read_fig3_seeds(path)
    base = [fig[p] for p in ("fifo-fixed", "drf-ps", "rrh", "dorm") if p in fig]
    return {n: max(float(b[i].mean()) for b in base) for i, n in enumerate(loads)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--history", type=int, default=100)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--fig3-seeds", default=None, help="oasis-fig3-seeds.csv for the ratios")
    args = ap.parse_args()
    tasks = [(v, s, n, args.history) for v in ("default", "history") for n in LOADS
             for s in range(1, args.seeds + 1)]
    with ProcessPoolExecutor(args.processes) as pool:
        rows = list(pool.map(run, tasks))
    base = best_baseline(args.fig3_seeds) if args.fig3_seeds else {}
    print(f"{'jobs':>4} {'default':>14} {'fixed history':>14} {'ratio':>6}"
          + ("  default÷best  history÷best" if base else ""))
    for n in LOADS:
        u = {v: np.array([r[2] for r in rows if r[0] == v and r[1] == n])
             for v in ("default", "history")}
        line = (f"{n:4d} {u['default'].mean():7.0f} ± {u['default'].std():4.0f} "
                f"{u['history'].mean():7.0f} ± {u['history'].std():4.0f} "
                f"{u['history'].mean() / u['default'].mean():6.2f}")
        if base:
            line += (f"  {u['default'].mean() / base[n]:12.2f}"
                     f"  {u['history'].mean() / base[n]:12.2f}")
        print(line)


if __name__ == "__main__":
    main()
