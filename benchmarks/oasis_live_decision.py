"""OASiS' first decision on 5 arrivals: in simulation, and live under the real controller.

Usage: .venv/bin/python benchmarks/oasis_live_decision.py [--repeats 5]

Five 2-GPU jobs (declared length 120 s) arrive at once on 2 nodes x 2 GPUs, OASiS with 60 s
slots. Printed, per repeat (sim and live interleaved) and as medians, the time of the first
``policy.plan`` call:
- ``sim``: ``stint sim``'s engine (``RunResult.latencies_s[0]``);
- ``live``: the real ``Controller`` on a fresh SQLite store with the local executor
  (``StepReport.plan_s``), time measured from the store's epoch (``Store.epoch``);
- ``live, epoch 0``: the same with the epoch forced to 0, i.e. time in Unix seconds as before the
  store had an epoch: the price table then spans every slot since 1970.
The ratio live / sim is the figure the enactment issue bounds (at most 1.5).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from stint.model.cluster import Cluster
from stint.model.job import JobSpec, divisor_counts
from stint.perf.scaling import ScalingModel
from stint.policies.registry import make_with_options
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.store import NewJob, Store
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator

OPTS = ("slot_s=60",)
JOBS, EST_S = 5, 120.0


def sim_decision_s() -> float:
    specs = [JobSpec(str(i + 1), 0.0, EST_S, 2, 2, 2, user="bench", application=f"j{i + 1}",
                     duration_s=EST_S, worker_counts=divisor_counts(2, 2, 2)) for i in range(JOBS)]
    res = Simulator(Cluster.uniform(2, 2), specs, make_with_options("oasis", OPTS),
                    ScalingModel(), CostModel.free()).run()
    return float(res.latencies_s[0])


def live_decision_s(epoch: float | None) -> float:
    with tempfile.TemporaryDirectory() as d:
        store = Store(f"sqlite:///{d}/stint.db")
        store.migrate()
        if epoch is not None:
            store.epoch(epoch)
        who = store.caller_for_token(store.create_token("bench", time.time()))
        assert who is not None
        ex = LocalExecutor(Path(d) / "executor", nodes=2, gpus_per_node=2)
        try:
            ctl = Controller(store, ex, make_with_options("oasis", OPTS),
                             ControllerConfig(Path(d) / "jobs"))
            now = time.time()
            for i in range(JOBS):
                store.add_job(NewJob(f"j{i + 1}", ["true"], 2, 2, 2, "standard", 1.0, None,
                                     est_s=EST_S), who, now)
            return ctl.step(now).plan_s
        finally:
            for jid in ex.running():
                ex.kill(jid)
            ex.close()
            store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rows = []
    print(f"{'repeat':>6} {'sim ms':>8} {'live ms':>8}")
    for r in range(args.repeats):  # interleaved, so load on the machine hits both alike
        row = (sim_decision_s(), live_decision_s(None))
        rows.append(row)
        print(f"{r:6d} {row[0] * 1e3:8.2f} {row[1] * 1e3:8.2f}")
    sim, live = (statistics.median(c) for c in zip(*rows))
    old = live_decision_s(0.0)  # once: it takes seconds
    print(f"median: sim {sim * 1e3:.2f} ms, live {live * 1e3:.2f} ms; live / sim = "
          f"{live / sim:.2f} (bar: <= 1.5). Live with epoch 0 (Unix time, once): "
          f"{old * 1e3:.0f} ms = {old / sim:.0f} x sim")


if __name__ == "__main__":
    main()
