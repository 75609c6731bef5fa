"""Does Dorm give the same totals on a busy machine? (Its HiGHS solves have a wall-clock limit.)

Usage: .venv/bin/python benchmarks/dorm_repeatable.py [--seeds 16 25] [--jobs 400] [--busy 4]
           [--time-limit S]

Runs Dorm on the Fig. 3 workloads of the given seeds twice in this process: once as the machine
is, once with ``--busy`` busy-loop processes competing for the cores. Prints both totals and
whether they are identical. ``--time-limit`` overrides Dorm's (default: Dorm's own). With the
old 0.25 s limit, seeds 16 and 25 at 400 jobs were the two
Fig. 3 runs whose solves reached it (docs/oasis.md, "Fifth pass").
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

from stint.experiments.slot_eval import evaluate
from stint.experiments.workload import make_workload
from stint.policies.dorm import Dorm


def spin() -> None:
    while True:
        pass


def totals(seeds: list[int], jobs: int, time_limit: float | None) -> list[float]:
    out = []
    for s in seeds:
        wl = make_workload(s, jobs)
        dorm = Dorm() if time_limit is None else Dorm(time_limit_s=time_limit)
        out.append(evaluate(dorm, wl.cluster, wl.jobs, wl.horizon, wl.slot_s).total_utility)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[16, 25])
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=None, help="Dorm's solver limit, s")
    args = ap.parse_args()
    t0 = time.perf_counter()
    idle = totals(args.seeds, args.jobs, args.time_limit)
    t_idle = time.perf_counter() - t0
    spinners = [mp.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    try:
        t0 = time.perf_counter()
        busy = totals(args.seeds, args.jobs, args.time_limit)
        t_busy = time.perf_counter() - t0
    finally:
        for p in spinners:
            p.terminate()
            p.join()
    print(f"{'seed':>4} {'as is':>12} {'busy':>12}  same")
    for s, a, b in zip(args.seeds, idle, busy):
        print(f"{s:4d} {a:12.4f} {b:12.4f}  {'yes' if a == b else 'NO'}")
    print(f"wall: {t_idle:.1f} s as is, {t_busy:.1f} s with {args.busy} busy processes")


if __name__ == "__main__":
    main()
