"""Whole ``stint sim`` commands against Pollux's own simulator, side by side in one run.

Pollux's simulator (petuum/adaptdl, branch osdi21-artifact, ``simulator/``) is not part of this
repository: check it out and install its requirements outside it, e.g. in /work/pollux-sim
(``simulator/`` from that branch, a venv with numpy<2, pandas<2, scipy, pymoo 0.4). This script
runs, alternately (Pollux, stint, Pollux, stint, ...), each a fresh process timed from outside
(wall, and the child's user+system CPU):
  Pollux:  <its python> simulator.py --policy P workloads/workload-W.csv
  stint:   stint sim --trace pollux:W --policy P --nodes 16 --gpus-per-node 4
(16 nodes x 4 GPUs, Pollux's job and cost models, decisions at every event; no plots) and prints
each pair's times, their ratio, and each side's average JCT (Pollux's from its last line).
Usage: .venv/bin/python benchmarks/sim_vs_pollux.py [--policies tiresias,optimus] [--runs 3]
       [--workload 6] [--pollux-dir /work/pollux-sim/simulator] [--pollux-python /work/pollux-sim/venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STINT = ROOT / ".venv" / "bin" / "stint"


def timed(cmd: list[str], cwd: Path | None = None) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="tiresias,optimus")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workload", type=int, default=6)
    ap.add_argument("--pollux-dir", type=Path, default=Path("/work/pollux-sim/simulator"))
    ap.add_argument("--pollux-python", default="/work/pollux-sim/venv/bin/python")
    args = ap.parse_args()
    print(f"{'policy':9} {'run':>3} {'Pollux wall/CPU s':>18} {'stint wall/CPU s':>17} {'wall x':>7} {'CPU x':>7} "
          f"{'Pollux JCT':>10} {'stint JCT':>9}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies.split(","):
            ratios: list[tuple[float, float]] = []
            for run in range(1, args.runs + 1):
                pw, pc, pout = timed([args.pollux_python, "simulator.py", "--policy", policy,
                                      f"workloads/workload-{args.workload}.csv"], cwd=args.pollux_dir)
                their_jct = float(pout.strip().splitlines()[-1].split(":")[1])
                out = Path(tmp) / f"{policy}-{run}"
                sw, sc, sout = timed([str(STINT), "sim", "--trace", f"pollux:{args.workload}", "--policy", policy,
                                      "--nodes", "16", "--gpus-per-node", "4", "--out", str(out), "--format", "json"])
                our_jct = json.loads(sout)[policy]["avg_jct_s"]
                ratios.append((pw / sw, pc / sc))
                print(f"{policy:9} {run:>3} {pw:>8.2f} / {pc:>7.2f} {sw:>7.3f} / {sc:>7.3f} {pw / sw:>7.0f} "
                      f"{pc / sc:>7.0f} {their_jct:>10,.0f} {our_jct:>9,.0f}", flush=True)
            print(f"{policy:9} median ratio: wall {statistics.median(r[0] for r in ratios):.0f}x, "
                  f"CPU {statistics.median(r[1] for r in ratios):.0f}x", flush=True)


if __name__ == "__main__":
    sys.exit(main())
