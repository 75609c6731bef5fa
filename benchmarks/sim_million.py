"""A million Philly-shaped jobs on 100,000 GPUs: generate the trace, simulate, print the cost.

Each policy runs in a fresh process (its peak RSS is its own): generation (``philly-shaped``,
``stint.sim.traces.philly_shaped``: sizes and durations resampled from the shipped Philly trace, arrivals
scaled to the cluster) and the simulation are timed apart. The target: under 5 minutes and
2 GB in all.
Usage: .venv/bin/python benchmarks/sim_million.py [--jobs 1000000] [--gpus 100000]
[--policies fifo,tiresias] [--seed 0] [--load 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys, time
w0, c0 = time.perf_counter(), time.process_time()
from stint.model import Cluster
from stint.policies import make
from stint.sim.engine import Simulator
from stint.sim.traces import philly_shaped
policy, jobs, gpus, seed, load = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
trace = philly_shaped(jobs, gpus, seed=seed, load_factor=load)
gen_wall, gen_cpu = time.perf_counter() - w0, time.process_time() - c0
s = Simulator(Cluster.uniform(gpus // 8, 8), trace.jobs, make(policy), trace.perf).run().summary()
print(json.dumps({"policy": policy, "jobs": s["jobs"], "gpus": gpus, "events": s["events"],
                  "gen_wall_s": gen_wall, "gen_cpu_s": gen_cpu, "sim_wall_s": s["wall_s"],
                  "sim_cpu_s": s["cpu_s"], "total_wall_s": time.perf_counter() - w0,
                  "total_cpu_s": time.process_time() - c0, "avg_jct_s": s["avg_jct_s"],
                  "gpu_utilization": s["gpu_utilization"], "avg_queue_s": s["avg_queue_s"],
                  "preemptions": s["preemptions"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--gpus", type=int, default=100_000)
    ap.add_argument("--policies", default="fifo,tiresias")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--load", type=float, default=1.0,
                    help="arrival rate x L (1: the Philly trace's offered load on 512 GPUs, 0.73)")
    args = ap.parse_args()
    rows = []
    for policy in args.policies.split(","):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, policy, str(args.jobs), str(args.gpus), str(args.seed), str(args.load)],
            check=True, capture_output=True, text=True,
        ).stdout.strip().splitlines()[-1]
        print(out, flush=True)
        rows.append(json.loads(out))
    print(f"\n{'policy':9} {'jobs':>9} {'GPUs':>7} {'gen s':>6} {'sim wall s':>10} {'sim CPU s':>9} "
          f"{'total wall s':>12} {'total CPU s':>11} {'jobs/CPU-s':>10} {'peak MB':>8} {'util':>5} {'queue s':>8}")
    for r in rows:
        print(f"{r['policy']:9} {r['jobs']:>9} {r['gpus']:>7} {r['gen_wall_s']:>6.1f} {r['sim_wall_s']:>10.1f} "
              f"{r['sim_cpu_s']:>9.1f} {r['total_wall_s']:>12.1f} {r['total_cpu_s']:>11.1f} "
              f"{r['jobs'] / r['sim_cpu_s']:>10.0f} {r['peak_rss_mb']:>8.0f} "
              f"{r['gpu_utilization']:>5.2f} {r['avg_queue_s']:>8.0f}")


if __name__ == "__main__":
    main()
