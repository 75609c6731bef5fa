"""How good is "when will it start": predicted against actual start on a replayed workload.

Usage: .venv/bin/python benchmarks/forecast_accuracy.py [--jobs 60] [--seed 1]

A seeded workload (Poisson arrivals, mean gap 20 s; 1, 2 or 4 GPUs; declared lengths 30-600 s,
log-uniform, which are also the true lengths) is replayed through the real ``Controller`` on a
SQLite store with the clocked executor (``runtime/replay.py``), on 2 nodes x 4 GPUs, under each
policy. The controller forecasts at every step where something changed (``forecast_s=0``). For
each job, the prediction is the estimated start written right after its submission; the actual
start is its first start. Printed per policy: median absolute error, median wait, their ratio
(the bar: under 0.10), and the share of jobs predicted within 10 % of their wait.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from pathlib import Path

from stint.model.job import JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies.registry import make_with_options
from stint.runtime.controller import Controller, ControllerConfig, StepReport
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.replay import replay
from stint.runtime.store import NewJob, Store

POLICIES = {"fifo": (), "tiresias": ("thresholds_gpu_s=600", "tick_s=10")}


def workload(n: int, seed: int) -> list[tuple[float, NewJob]]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(1 / 20.0)
        gpus = rng.choice((1, 1, 2, 2, 4))
        est = round(30.0 * 20 ** rng.random(), 1)
        out.append((round(t, 1), NewJob(f"j{i + 1}", ["true"], gpus, gpus, gpus, "standard",
                                        1.0, None, est_s=est)))
    return out


def run(policy: str, jobs: list[tuple[float, NewJob]]) -> tuple[list[float], list[float]]:
    """(absolute errors of the predicted start, waits) per job, in seconds."""
    with tempfile.TemporaryDirectory() as d:
        store = Store(f"sqlite:///{d}/stint.db")
        store.migrate()
        store.epoch(0.0)
        who = store.caller_for_token(store.create_token("bench", 0.0))
        assert who is not None
        # job ids are 1, 2, ... in submission order: the clocked executor runs each its length
        specs = {str(i + 1): JobSpec(str(i + 1), t, j.est_s or 1.0, j.gpus, j.gpus, j.gpus)
                 for i, (t, j) in enumerate(sorted(jobs, key=lambda s: s[0]))}
        ex = ClockedExecutor([4, 4], specs, ScalingModel())
        opts = POLICIES[policy]
        ctl = Controller(store, ex, make_with_options(policy, opts), ControllerConfig(
            Path(d) / "jobs", forecast_policy=lambda: make_with_options(policy, opts),
            forecast_s=0.0))
        predicted: dict[int, float | None] = {}

        def observe(t: float, report: StepReport) -> None:
            for row in store.list_jobs(who, states=["queued", "admitted"]):
                if row.id not in predicted and row.est_start_at is not None:
                    predicted[row.id] = row.est_start_at
            for row in store.list_jobs(who, states=["starting", "running"]):
                predicted.setdefault(row.id, row.submitted_at)  # started at once: predicted now

        replay(ctl, ex, who, jobs, observe)
        rows = store.list_jobs(who)
        store.close()
    errors, waits = [], []
    for row in rows:
        if row.first_start_at is None or predicted.get(row.id) is None:
            continue
        waits.append(row.first_start_at - row.submitted_at)
        errors.append(abs(row.first_start_at - float(predicted[row.id] or 0.0)))
    return errors, waits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    jobs = workload(args.jobs, args.seed)
    print(f"{'policy':10} {'jobs':>4} {'median |err| s':>14} {'median wait s':>13} "
          f"{'ratio':>6} {'within 10% of wait':>18}")
    for policy in POLICIES:
        errors, waits = run(policy, jobs)
        med_err, med_wait = statistics.median(errors), statistics.median(waits)
        close = sum(e <= 0.1 * max(w, 1.0) for e, w in zip(errors, waits)) / len(errors)
        print(f"{policy:10} {len(errors):4d} {med_err:14.1f} {med_wait:13.1f} "
              f"{med_err / max(med_wait, 1e-9):6.3f} {close:18.0%}")


if __name__ == "__main__":
    main()
