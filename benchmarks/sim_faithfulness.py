"""Faithfulness: Pollux's workloads on 16 nodes x 4 GPUs, job by job against Pollux's own simulator.

The yardstick is the per-job JCTs Pollux's authors published from their simulator
(``benchmarks/data/pollux_sim/``, see its PROVENANCE.md; their workload-6 averages are the paper's
Tiresias 3,469.7 s, Optimus 5,301.9 s, Pollux 2,446.1 s). Each variant runs under Pollux's cost
model (30 s for every non-empty allocation, the first start included) with Pollux's job model
(``pollux-progress``; ``--samples`` for the sample-counting model instead); Pollux with adaptive
batch sizes (its jobs pick theirs), the others with the workload's. Decisions at every event
(our default) or every 60 s (Pollux's simulator); Tiresias also with ``strict_order=False`` (the
gentler variant: a waiting job never preempts one of its own queue; the default, as the paper
and Pollux's implementation, lets it preempt a later one).
Prints per workload: our average JCT, Pollux's, their ratio and the median of per-job ratios.
Usage: .venv/bin/python benchmarks/sim_faithfulness.py [--workloads 1,...,8] [--samples]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path
from typing import Any

from stint.model import Cluster
from stint.policies import make
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator
from stint.sim.runner import perf_for
from stint.sim.traces import load

DATA = Path(__file__).resolve().parent / "data" / "pollux_sim"
VARIANTS: list[tuple[str, dict[str, Any], float | None]] = [
    ("tiresias", {}, None),
    ("tiresias", {}, 60.0),
    ("tiresias", {"strict_order": False}, None),
    ("optimus", {}, None),
    ("optimus", {}, 60.0),
    ("pollux", {}, None),
    ("pollux", {}, 60.0),
]


def reference(policy: str) -> dict[str, dict[str, float]]:
    with gzip.open(DATA / f"{policy}-jcts.json.gz", "rt") as fh:
        out: dict[str, dict[str, float]] = json.load(fh)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--samples", action="store_true", help="the sample-counting job model instead")
    args = ap.parse_args()
    refs = {p: reference(p) for p in {v[0] for v in VARIANTS}}
    traces = {w: load(f"pollux:{w}", samples=args.samples) for w in args.workloads.split(",")}
    print(f"{'policy':27} {'decisions':>11} {'batch':8} {'workload':>8} {'ours s':>7} {'Pollux s':>8} "
          f"{'ratio':>6} {'per-job median':>14} {'sim s':>6}")
    for name, params, period in VARIANTS:
        variant = name + "".join(f" {k}={v}" for k, v in params.items())
        label = "every event" if period is None else f"every {period:g} s"
        ratios, medians = [], []
        for w, trace in traces.items():
            perf, batch = perf_for(trace, name, "auto")
            sim = Simulator(Cluster.uniform(16, 4), trace.jobs, make(name, **params), perf,
                            CostModel.pollux(), decision_period_s=period)
            res = sim.run()
            ours = {r.job_id: r.jct_s for r in res.records}
            theirs = refs[name][f"workload-{w}"]
            avg, ref = statistics.mean(ours.values()), statistics.mean(theirs.values())
            med = statistics.median(ours[j] / theirs[j] for j in theirs)
            ratios.append(avg / ref)
            medians.append(med)
            print(f"{variant:27} {label:>11} {batch:8} {w:>8} {avg:>7,.0f} {ref:>8,.0f} {avg / ref:>6.2f} "
                  f"{med:>14.2f} {res.wall_s:>6.1f}", flush=True)
        print(f"{variant:27} {label:>11} {'':8} {'range':>8} {'':>7} {'':>8} "
              f"{min(ratios):.2f}-{max(ratios):.2f} {min(medians):>9.2f}-{max(medians):.2f}\n", flush=True)


if __name__ == "__main__":
    main()
