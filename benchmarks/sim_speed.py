"""Simulator speed on the Philly trace: jobs/s, wall time and peak memory per policy and size.

Each (policy, size) runs in a fresh process so that its peak RSS is its own. Prints one JSON
line per run and a table with the growth from the smallest size (linear scaling keeps jobs/s
flat). Usage: .venv/bin/python benchmarks/sim_speed.py [--sizes 10000,40000,82247]
[--policies fifo,srtf,drf,tiresias] [--gpus 512]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import json, resource, sys
from stint.model import Cluster
from stint.policies import make
from stint.sim.engine import Simulator
from stint.sim.traces import Filters, load
policy, size, gpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
trace = load("philly", filters=Filters(limit=size))
s = Simulator(Cluster.uniform(gpus // 8, 8), trace.jobs, make(policy), trace.perf).run().summary()
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"policy": policy, "jobs": s["jobs"], "wall_s": s["wall_s"], "jobs_per_s": s["jobs_per_s"],
                  "cpu_s": s["cpu_s"], "jobs_per_cpu_s": s["jobs_per_cpu_s"],
                  "events": s["events"], "policy_calls": s["policy_calls"],
                  "latency_ms_mean": s["policy_latency_ms_mean"], "latency_ms_p99": s["policy_latency_ms_p99"],
                  "peak_rss_mb": rss_mb}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,40000,82247")
    ap.add_argument("--policies", default="fifo,srtf,drf,tiresias")
    ap.add_argument("--gpus", type=int, default=512)
    args = ap.parse_args()
    rows = []
    for policy in args.policies.split(","):
        for size in (int(x) for x in args.sizes.split(",")):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, policy, str(size), str(args.gpus)],
                check=True, capture_output=True, text=True,
            ).stdout.strip().splitlines()[-1]
            print(out, flush=True)
            rows.append(json.loads(out))
    print(f"\n{'policy':9} {'jobs':>7} {'wall s':>7} {'jobs/s':>7} {'CPU s':>7} {'jobs/CPU-s':>10} "
          f"{'CPU s/10k jobs':>14} {'mean/p99 call ms':>17} {'peak MB':>8}")
    for r in rows:
        print(f"{r['policy']:9} {r['jobs']:>7} {r['wall_s']:>7.1f} {r['jobs_per_s']:>7.0f} {r['cpu_s']:>7.1f} "
              f"{r['jobs_per_cpu_s']:>10.0f} {r['cpu_s'] / r['jobs'] * 1e4:>14.2f} "
              f"{r['latency_ms_mean']:>8.3f}/{r['latency_ms_p99']:<8.3f} {r['peak_rss_mb']:>8.0f}")


if __name__ == "__main__":
    main()
