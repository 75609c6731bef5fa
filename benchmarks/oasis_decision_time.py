"""OASiS decision time per arriving job (Alg. 1 + Alg. 2), and how it grows with H, T and E_i N_i.

Usage: .venv/bin/python benchmarks/oasis_decision_time.py [--quick]

Each configuration builds the Fig. 3 workload (400 jobs over T slots, H = K hosts, seed 1), then
offers the jobs to a fresh OASiS in arrival order, timing each decision: the DP, the admission
test, the commit and the price update. Printed: wall and CPU (process) time per decision in ms —
median, p99, max — and the CPU median relative to the baseline configuration (H = K = 50,
T = 300, 64 quanta). CPU time is the steadier figure on a shared machine. ``D`` caps the DP's
workload units (``max_quanta``): a job is planned in min(E_i N_i, D) units.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from stint.experiments.workload import make_workload
from stint.model.allocation import Plan
from stint.policies.oasis import OASiS


def decision_times(hosts: int, horizon: int, quanta: int, jobs: int = 400
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Wall and CPU milliseconds per decision."""
    wl = make_workload(1, jobs, horizon=horizon, workers=hosts, ps=hosts)
    pol = OASiS(slot_s=wl.slot_s, end_slot=horizon, history=wl.jobs, max_quanta=quanta)
    pol.setup(wl.cluster)
    wall, cpu = [], []
    for spec in wl.jobs:
        a = math.ceil(spec.arrival_s / wl.slot_s)
        t0, c0 = time.perf_counter(), time.process_time()
        pol.decide(spec, a, Plan())
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return np.array(wall) * 1000.0, np.array(cpu) * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer configurations")
    args = ap.parse_args()
    base = np.median(decision_times(50, 300, 64)[1])
    configs = [("baseline", 50, 300, 64)]
    configs += [("H=K", h, 300, 64) for h in (10, 25, 100)]
    configs += [("T", 50, t, 64) for t in (100, 200, 600)]
    configs += [("quanta (E_i N_i cap)", 50, 300, q) for q in (16, 32, 128, 256)]
    if args.quick:
        configs = configs[:1]
    print(f"{'what':22} {'H=K':>4} {'T':>4} {'D':>4} {'wall med':>8} {'wall p99':>8} "
          f"{'cpu med':>8} {'cpu p99':>8} {'cpu max':>8} {'cpu med/base':>12}")
    for what, h, t, q in configs:
        wall, cpu = decision_times(h, t, q)
        print(f"{what:22} {h:4d} {t:4d} {q:4d} {np.median(wall):8.2f} "
              f"{np.percentile(wall, 99):8.2f} {np.median(cpu):8.2f} {np.percentile(cpu, 99):8.2f} "
              f"{cpu.max():8.2f} {np.median(cpu) / base:12.2f}")


if __name__ == "__main__":
    main()
