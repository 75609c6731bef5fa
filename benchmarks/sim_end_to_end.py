"""Whole ``stint sim`` commands, before and after a change, interleaved in one run.

Extracts ``src/`` of a git revision (default: the commit before the speed work) into a temporary
directory and runs the same commands with it and with this checkout, alternately (A B A B ...),
each a fresh process timed from outside (wall, and the child's user+system CPU). Prints the
median of each and the ratio. Usage:
.venv/bin/python benchmarks/sim_end_to_end.py [--before REV] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from stint.cli import main; sys.argv[0] = 'stint'; main()"
CASES = {
    "import + make('fifo')": ["-c", "from stint.policies.registry import make; make('fifo')"],
    "sim pollux:6 tiresias": ["-c", CLI, "sim", "--trace", "pollux:6", "--policy", "tiresias"],
    "  same, --no-plots": ["-c", CLI, "sim", "--trace", "pollux:6", "--policy", "tiresias", "--no-plots"],
    "sim pollux:6 optimus": ["-c", CLI, "sim", "--trace", "pollux:6", "--policy", "optimus"],
    "  same, --no-plots ": ["-c", CLI, "sim", "--trace", "pollux:6", "--policy", "optimus", "--no-plots"],
    "sim philly 5k fifo": ["-c", CLI, "sim", "--trace", "philly", "--limit", "5000", "--policy", "fifo"],
}


def timed(src: Path, args: list[str], out: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    extra = ["--out", str(out), "--format", "json"] if "sim" in args else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args, *extra], env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="a4cdb34", help="git revision to compare against")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "src"],
                                 check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        sources = {"before": old / "src", "after": ROOT / "src"}
        print(f"{'command':24} {'before wall/CPU s':>18} {'after wall/CPU s':>17} {'wall ratio':>10} {'CPU ratio':>9}")
        for label, cmd in CASES.items():
            runs: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
            for i in range(args.runs + 1):  # the first pair warms the disk cache and is dropped
                for name, src in sources.items():
                    r = timed(src, cmd, Path(tmp) / f"out-{name}")
                    if i:
                        runs[name].append(r)
            med = {n: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for n, v in runs.items()}
            b, a = med["before"], med["after"]
            print(f"{label:24} {b[0]:>9.3f}/{b[1]:<8.3f} {a[0]:>8.3f}/{a[1]:<8.3f} {b[0] / a[0]:>9.2f}x "
                  f"{b[1] / a[1]:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
