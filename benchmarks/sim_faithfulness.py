"""Faithfulness: Pollux's workloads on 16 nodes x 4 GPUs, job by job against Pollux's own simulator.

The yardstick is the per-job JCTs Pollux's authors published from their simulator
(``benchmarks/data/pollux_sim/``, see its PROVENANCE.md): the eight workloads at the standard job
load (their workload-6 averages are the paper's Tiresias 3,469.7 s, Optimus 5,301.9 s, Pollux
2,446.1 s) and the eight of each other relative job load of their Fig. 8a (0.5x, 1.5x, 2x; other
workloads, not rescaled copies). Each variant runs under Pollux's cost model (30 s for every
non-empty allocation, the first start included) with Pollux's job model (``pollux-progress``;
``--samples`` for the sample-counting model instead); Pollux with adaptive batch sizes (its jobs
pick theirs), the others with the workload's. Decisions at every event (our default) or every
60 s (Pollux's simulator); Tiresias also with ``strict_order=False``. Knowledge of job lengths:
``oracle`` by default, as Pollux's simulator gives its Optimus the remaining iterations (Tiresias
and Pollux read no length); ``--knowledge declared`` for what a deployed Optimus would know.
Prints per load and workload: our average JCT, Pollux's, their ratio and the median of per-job
ratios; per load, the ratio of the means over the workloads (Pollux's "mean").
Usage: .venv/bin/python benchmarks/sim_faithfulness.py [--loads 0.5,1.0,1.5,2.0] [--workloads 1,...,8]
       [--variants tiresias,optimus@60,...] [--knowledge oracle|declared] [--samples]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path
from typing import Any

from stint.model import Cluster
from stint.policies import make
from stint.policies.knowledge import Knowledge, Mode
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator
from stint.sim.runner import perf_for
from stint.sim.traces import Trace, load

DATA = Path(__file__).resolve().parent / "data" / "pollux_sim"
VARIANTS: dict[str, tuple[str, dict[str, Any], float | None]] = {
    "tiresias": ("tiresias", {}, None),
    "tiresias@60": ("tiresias", {}, 60.0),
    "tiresias-lenient": ("tiresias", {"strict_order": False}, None),
    "optimus": ("optimus", {}, None),
    "optimus@60": ("optimus", {}, 60.0),
    "pollux": ("pollux", {}, None),
    "pollux@60": ("pollux", {}, 60.0),
}


def reference(policy: str, load_x: float) -> dict[str, dict[str, float]]:
    name = f"{policy}-jcts.json.gz" if load_x == 1.0 else f"{policy}-{load_x:.1f}-jcts.json.gz"
    with gzip.open(DATA / name, "rt") as fh:
        out: dict[str, dict[str, float]] = json.load(fh)
    return out


def workload(load_x: float, w: str, samples: bool) -> Trace:
    if load_x == 1.0:
        return load(f"pollux:{w}", samples=samples)
    return load(str(DATA / "workloads" / f"load-{load_x:.1f}-workload-{w}.csv.gz"), samples=samples)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loads", default="0.5,1.0,1.5,2.0")
    ap.add_argument("--workloads", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--knowledge", choices=("oracle", "declared"), default="oracle")
    ap.add_argument("--samples", action="store_true", help="the sample-counting job model instead")
    args = ap.parse_args()
    loads = [float(x) for x in args.loads.split(",")]
    names = args.variants.split(",")
    print(f"knowledge: {args.knowledge}")
    print(f"{'variant':17} {'load':>4} {'workload':>8} {'ours s':>7} {'Pollux s':>8} {'ratio':>6} "
          f"{'per-job median':>14} {'cpu s':>6}")
    for load_x in loads:
        traces = {w: workload(load_x, w, args.samples) for w in args.workloads.split(",")}
        for variant in names:
            name, params, period = VARIANTS[variant]
            theirs_all = reference(name, load_x)
            ours_avgs, theirs_avgs, medians = [], [], []
            for w, trace in traces.items():
                perf, _ = perf_for(trace, name, "auto")
                cpu0 = time.process_time()
                sim = Simulator(Cluster.uniform(16, 4), trace.jobs, make(name, **params), perf,
                                CostModel.pollux(), decision_period_s=period,
                                knowledge=Knowledge(Mode(args.knowledge)))
                res = sim.run()
                ours = {r.job_id: r.jct_s for r in res.records}
                theirs = theirs_all[f"workload-{w}"]
                avg, ref = statistics.mean(ours.values()), statistics.mean(theirs.values())
                med = statistics.median(ours[j] / theirs[j] for j in theirs)
                ours_avgs.append(avg)
                theirs_avgs.append(ref)
                medians.append(med)
                print(f"{variant:17} {load_x:>4g} {w:>8} {avg:>7,.0f} {ref:>8,.0f} {avg / ref:>6.2f} "
                      f"{med:>14.2f} {time.process_time() - cpu0:>6.1f}", flush=True)
            ratio = statistics.mean(ours_avgs) / statistics.mean(theirs_avgs)
            print(f"{variant:17} {load_x:>4g} {'mean':>8} {statistics.mean(ours_avgs):>7,.0f} "
                  f"{statistics.mean(theirs_avgs):>8,.0f} {ratio:>6.3f} "
                  f"{min(medians):>6.2f}-{max(medians):.2f}\n", flush=True)


if __name__ == "__main__":
    main()
