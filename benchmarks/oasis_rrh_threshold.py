"""Sensitivity: Fig. 3's "OASiS ÷ best baseline" as RRH's admission threshold varies.

Usage: .venv/bin/python benchmarks/oasis_rrh_threshold.py --fig3-seeds DIR/oasis-fig3-seeds.csv
           [--thresholds 0 0.5 1 2 5 10 20 40] [--tune-seeds 10] [--processes 2]

The paper gives neither RRH's threshold nor its delay cost (ours: threshold 1.0, docs/oasis.md),
and from 300 jobs on our RRH is the best baseline, so the threshold can decide the bar "the
ratio grows with load". Printed:

1. Tuning: RRH alone at every threshold on seeds 101.. (``--tune-seeds`` of them, not the
   figure's), mean total over all loads. The best is what a baseline tuned for itself would
   use; it is chosen without looking at OASiS.
2. On the figure's seeds (those in the CSV): RRH's mean total per load at every threshold and,
   with the other policies' per-seed totals from the CSV, OASiS ÷ best baseline per load and
   whether it grows at every step.
3. For the tuned and the default threshold: a bootstrap over seeds (2000 resamples of whole
   workloads) of the ratio's change at each step of load, median and 5th-95th percentiles.
"""

from __future__ import annotations

import argparse
import itertools
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from stint.experiments.oasis_figs import LOADS
from stint.experiments.oasis_report import bootstrap_steps, ratio_to_best, read_fig3_seeds
from stint.experiments.slot_eval import evaluate
from stint.experiments.workload import make_workload
from stint.policies.rrh import RRH

OTHERS = ("fifo-fixed", "drf-ps", "dorm")


def run(args: tuple[float, int, int]) -> tuple[float, int, int, float]:
    threshold, seed, jobs = args
    wl = make_workload(seed, jobs)
    res = evaluate(RRH(slot_s=wl.slot_s, threshold=threshold), wl.cluster, wl.jobs,
                   wl.horizon, wl.slot_s)
    return threshold, seed, jobs, res.total_utility


def rrh_totals(thresholds: list[float], seeds: list[int], processes: int
               ) -> dict[float, np.ndarray]:
    """Per threshold: RRH's totals, shape (loads, seeds)."""
    tasks = [(t, s, n) for t in thresholds for n in LOADS for s in seeds]
    with ProcessPoolExecutor(processes) as pool:
        rows = list(pool.map(run, tasks))
    col = {s: i for i, s in enumerate(seeds)}
    out = {t: np.zeros((len(LOADS), len(seeds))) for t in thresholds}
    for t, s, n, u in rows:
        out[t][LOADS.index(n), col[s]] = u
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fig3-seeds", required=True, help="oasis-fig3-seeds.csv of a Fig. 3 run")
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0, 0.5, 1, 2, 5, 10, 20, 40])
    ap.add_argument("--tune-seeds", type=int, default=10)
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args()
    thresholds = sorted(set(args.thresholds) | {RRH().threshold})

    tune = rrh_totals(thresholds, list(range(101, 101 + args.tune_seeds)), args.processes)
    tuned = max(thresholds, key=lambda t: tune[t].mean(axis=1).sum())
    print(f"1. tuning seeds 101-{100 + args.tune_seeds}: RRH mean total summed over loads")
    for t in thresholds:
        print(f"   threshold {t:5g}: {tune[t].mean(axis=1).sum():7.0f}"
              + ("   <- tuned" if t == tuned else ""))

    loads, seeds, fig = read_fig3_seeds(args.fig3_seeds)
    if loads != list(LOADS):
        raise SystemExit(f"{args.fig3_seeds}: loads {loads}, expected {list(LOADS)}")
    rrh = rrh_totals(thresholds, seeds, args.processes)
    others = [fig[p] for p in OTHERS]
    print(f"\n2. figure seeds {seeds[0]}-{seeds[-1]}: RRH mean total | OASiS ÷ best baseline, "
          f"loads {list(LOADS)}")
    for t in thresholds:
        r = ratio_to_best(fig["oasis"], [*others, rrh[t]])
        grows = bool((np.diff(r) > 0).all())
        mark = " (tuned)" if t == tuned else ""
        mark += " (default)" if t == RRH().threshold else ""
        print(f"   threshold {t:5g}: " + " ".join(f"{m:6.0f}" for m in rrh[t].mean(axis=1))
              + " | " + " ".join(f"{x:.2f}" for x in r) + f" | grows: {'yes' if grows else 'no'}"
              + mark)

    steps = [f"{a}→{b}" for a, b in itertools.pairwise(LOADS)]
    print("\n3. change of OASiS ÷ best baseline at each step of load, bootstrap over seeds: "
          "median [90% interval]")
    for t in sorted({tuned, RRH().threshold}):
        lo, mid, hi = bootstrap_steps(fig["oasis"], [*others, rrh[t]])
        print(f"   threshold {t:5g}: " + ", ".join(
            f"{s} {m:+.2f} [{a:+.2f}, {b:+.2f}]" for s, m, a, b in zip(steps, mid, lo, hi)))


if __name__ == "__main__":
    main()
