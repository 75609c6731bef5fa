"""Faithfulness: Pollux workload 6 on 16 nodes x 4 GPUs with the profile-based model, against the
average JCTs Pollux's own simulator reports (Tiresias 3,470 s, Optimus 5,302 s; Qiao et al.,
OSDI'21). Runs both our event-driven default and Pollux's 60 s decision period, with Pollux's
cost model (30 s per (re)allocation). Usage: .venv/bin/python benchmarks/sim_faithfulness.py
"""

from __future__ import annotations

from stint.sim.costs import CostModel
from stint.sim.runner import SimConfig, run_all

POLLUX = {"tiresias": 3470.0, "optimus": 5302.0}


def main() -> None:
    print(f"{'policy':9} {'decisions':>12} {'ours avg JCT s':>15} {'Pollux':>8} {'ratio':>6}")
    for period in (None, 60.0):
        cfg = SimConfig(trace="pollux:6", policies=tuple(POLLUX), nodes=16, gpus_per_node=4,
                        costs=CostModel.pollux(), decision_period_s=period)
        _, _, results = run_all(cfg)
        for name, r in results.items():
            avg = r.summary()["avg_jct_s"]
            label = "every event" if period is None else f"every {period:g} s"
            print(f"{name:9} {label:>12} {avg:>15,.0f} {POLLUX[name]:>8,.0f} {avg / POLLUX[name]:>6.2f}")


if __name__ == "__main__":
    main()
