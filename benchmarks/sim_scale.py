"""Simulator cost against cluster size: the whole Philly trace on 512, 4,096 and 32,768 GPUs.

Each (policy, size) runs in a fresh process; prints one JSON line per run, then a table of CPU
seconds (the steady figure on a shared machine) with the ratio to the smallest size. The
target: 32,768 GPUs at most 1.5x the CPU time of 512.
Usage: .venv/bin/python benchmarks/sim_scale.py [--gpus 512,4096,32768] [--policies fifo,tiresias]
[--limit N]
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
policy, gpus, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) or None
trace = load("philly", filters=Filters(limit=limit))
s = Simulator(Cluster.uniform(gpus // 8, 8), trace.jobs, make(policy), trace.perf).run().summary()
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"policy": policy, "gpus": gpus, "jobs": s["jobs"], "events": s["events"],
                  "wall_s": s["wall_s"], "cpu_s": s["cpu_s"], "peak_rss_mb": rss_mb}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="512,4096,32768")
    ap.add_argument("--policies", default="fifo,tiresias")
    ap.add_argument("--limit", type=int, default=0, help="first N jobs (0: the whole trace)")
    args = ap.parse_args()
    rows = []
    for policy in args.policies.split(","):
        for gpus in (int(x) for x in args.gpus.split(",")):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, policy, str(gpus), str(args.limit)],
                check=True, capture_output=True, text=True,
            ).stdout.strip().splitlines()[-1]
            print(out, flush=True)
            rows.append(json.loads(out))
    print(f"\n{'policy':9} {'GPUs':>7} {'jobs':>7} {'events':>8} {'wall s':>7} {'CPU s':>7} "
          f"{'CPU vs smallest':>15} {'peak MB':>8}")
    for r in rows:
        base = next(x for x in rows if x["policy"] == r["policy"])
        print(f"{r['policy']:9} {r['gpus']:>7} {r['jobs']:>7} {r['events']:>8} {r['wall_s']:>7.1f} "
              f"{r['cpu_s']:>7.1f} {r['cpu_s'] / base['cpu_s']:>14.2f}x {r['peak_rss_mb']:>8.0f}")


if __name__ == "__main__":
    main()
