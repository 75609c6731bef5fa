"""Faithfulness: Pollux workload 6 on 16 nodes x 4 GPUs with the profile-based model, against the
average JCTs Pollux's own simulator reports (Tiresias 3,470 s, Optimus 5,302 s; Qiao et al.,
OSDI'21). Runs our event-driven default and Pollux's 60 s decision period, with Pollux's cost
model (30 s per (re)allocation), and Tiresias also with ``strict_order`` (Pollux's in-queue
re-ordering). Usage: .venv/bin/python benchmarks/sim_faithfulness.py
"""

from __future__ import annotations

from stint.model import Cluster
from stint.policies import make
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator
from stint.sim.traces import load

POLLUX = {"tiresias": 3470.0, "optimus": 5302.0}
VARIANTS = [("tiresias", {}), ("tiresias", {"strict_order": True}), ("optimus", {})]


def main() -> None:
    trace = load("pollux:6")
    print(f"{'policy':30} {'decisions':>12} {'ours avg JCT s':>15} {'Pollux':>8} {'ratio':>6}")
    for name, params in VARIANTS:
        for period in (None, 60.0):
            sim = Simulator(Cluster.uniform(16, 4), trace.jobs, make(name, **params), trace.perf,
                            CostModel.pollux(), decision_period_s=period)
            avg = sim.run().summary()["avg_jct_s"]
            label = "every event" if period is None else f"every {period:g} s"
            variant = name + "".join(f" {k}={v}" for k, v in params.items())
            print(f"{variant:30} {label:>12} {avg:>15,.0f} {POLLUX[name]:>8,.0f} {avg / POLLUX[name]:>6.2f}")


if __name__ == "__main__":
    main()
