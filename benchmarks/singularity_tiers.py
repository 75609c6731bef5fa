"""Singularity's policy against the baselines, per SLA tier, on Philly and a Pollux workload.

Prints one Markdown table per workload: utilization, mean JCT, preemptions / resizes /
migrations per job-hour, GPU-hours spent in mechanism (modelled restart delays), and per tier
(premium, standard, basic) the share of jobs meeting the target and the mean and 5th-percentile
attainment (``stint.model.sla``; targets premium 0.95, standard 0.70, basic best effort), and how
many basic jobs completed; per-tier JCTs are in ``stint sim``'s summary.json. Tiers are drawn by
job count with ``--tiers``
(default premium 10 %, standard 30 %, basic 60 %, seed 0). Each workload runs with the daily
inference reservation (``--reservations``, default ``peak=0.3,start=9,end=21``: 30 % of the nodes
from 9 h to 21 h of the trace's clock, ``stint.sim.reservation``) and without it (``none``);
utilization leaves the reserved GPU-hours out of its denominator.

    .venv/bin/python benchmarks/singularity_tiers.py                 # Philly first 3000 jobs + pollux:6
    .venv/bin/python benchmarks/singularity_tiers.py --limit 0       # the whole Philly trace (slow)
    .venv/bin/python benchmarks/singularity_tiers.py --last 3        # + the 3 jobs that end last, per policy

Knowledge of job lengths: ``--knowledge declared`` (the default: Philly declares none, so the
user-history estimate) or ``oracle``; the last line compares singularity's basic tier's mean JCT
with the mean JCT of the best tier-blind baseline of the same run.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import Any

from stint.sim.metrics import JobRecord
from stint.sim.reservation import Reservation
from stint.sim.runner import SimConfig, run_all
from stint.sim.traces import Filters, TierMix

# Every registered baseline that schedules GPU jobs without parameter servers or slot plans;
# pollux and fifo-fixed only on Pollux workloads (on Philly, pollux did not finish 2,000 jobs in
# 300 s and fifo-fixed not the whole trace in 11 CPU-minutes).
POLICIES = ("fifo", "fifo-fixed", "srtf", "sjf", "drf", "tiresias", "optimus", "pollux", "singularity")
PHILLY_SKIPS = ("pollux", "fifo-fixed")
TIER_BLIND = frozenset(POLICIES) - {"singularity"}


def last_jobs(records: list[JobRecord], n: int) -> list[str]:
    """The ``n`` jobs that finish last (they set the makespan utilization is measured over)."""
    day = 86400.0
    return [f"  - {x.job_id} ({x.tier}, {x.gpus} GPUs): arrived {x.arrival_s / day:.2f} d, first start "
            f"{(x.first_start_s or 0.0) / day:.2f} d, finished {x.finish_s / day:.2f} d, "
            f"ideal {x.ideal_s / day:.2f} d, "
            f"{x.preemptions} preemptions" for x in sorted(records, key=lambda x: (-x.finish_s, x.job_id))[:n]]


def table(title: str, cfg: SimConfig, last: int = 0) -> str:
    t0 = time.process_time()
    trace, cluster, results = run_all(cfg)
    lines = [(f"### {title}: {len(trace.jobs):,} jobs on {cluster.total_gpus} GPUs "
             f"(CPU {time.process_time() - t0:.0f} s)"), "",
             ("| policy | util | reserved GPU-h | avg JCT h | preempt/job-h | resize/job-h | migrate/job-h "
              "| mechanism GPU-h "
             "| premium met / mean / p5 | standard met / mean / p5 | basic mean / median / p5 | basic avg JCT h "
             "| basic done |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        s = r.summary()
        job_h = sum(x.jct_s for x in r.records) / 3600.0 or 1.0
        tiers = s["tiers"]

        def cell(t: str, met: bool = True, tiers: dict[str, Any] = tiers) -> str:
            v = tiers.get(t)
            if v is None:
                return "-"
            head = f"{v['sla_met_fraction']:.3f} / " if met else ""
            median = "" if met else f"{v['median_attainment']:.3f} / "
            return f"{head}{v['mean_attainment']:.3f} / {median}{v['p5_attainment']:.3f}"

        basic = tiers.get("basic", {"completed": 0, "jobs": 0, "avg_jct_s": 0.0})
        lines.append(f"| {name} | {s['gpu_utilization']:.3f} | {s['reserved_gpu_hours']:,.0f} "
                     f"| {s['avg_jct_s'] / 3600:.2f} "
                     f"| {s['preemptions'] / job_h:.4f} | {s['resizes'] / job_h:.4f} "
                     f"| {s['migrations'] / job_h:.4f} | {s['mechanism_gpu_hours']:.1f} "
                     f"| {cell('premium')} | {cell('standard')} "
                     f"| {cell('basic', met=False)} | {basic['avg_jct_s'] / 3600:.2f} "
                     f"| {basic['completed']}/{basic['jobs']} |")
    blind = {n: r.summary()["avg_jct_s"] for n, r in results.items() if n in TIER_BLIND}
    if "singularity" in results and blind:
        best = min(blind, key=lambda n: blind[n])
        basic_s = results["singularity"].summary()["tiers"].get("basic", {}).get("avg_jct_s", 0.0)
        lines += ["", (f"singularity's basic mean JCT / the best tier-blind mean JCT ({best}): "
                       f"{basic_s / blind[best]:.3f}; knowledge: {cfg.knowledge}")]
    for name, r in results.items() if last else ():
        lines += ["", f"{name}: makespan {r.summary()['makespan_s'] / 86400.0:.2f} d; last to finish:"]
        lines += last_jobs(r.records, last)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=3000, help="Philly: first N jobs (0 = all)")
    ap.add_argument("--gpus", type=int, default=512, help="Philly cluster size (nodes of 8)")
    ap.add_argument("--tiers", default="premium=0.1,standard=0.3,basic=0.6")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reservations", default="peak=0.3,start=9,end=21;none",
                    help="';'-separated reservations to run each workload with ('none': without)")
    ap.add_argument("--workloads", default="philly,pollux:6", help="philly and/or pollux:N")
    ap.add_argument("--knowledge", choices=("declared", "oracle"), default="declared",
                    help="what policies know of job lengths (docs/simulator.md, Knowledge)")
    ap.add_argument("--last", type=int, default=0, help="also list the N jobs that finish last, per policy")
    args = ap.parse_args()
    mix = TierMix.parse(args.tiers)
    policies = tuple(p for p in args.policies.split(",") if p)
    for workload in args.workloads.split(","):
        if workload == "philly":
            cfg = SimConfig(trace="philly", policies=tuple(p for p in policies if p not in PHILLY_SKIPS),
                            nodes=args.gpus // 8, gpus_per_node=8,
                            seed=args.seed, filters=Filters(limit=args.limit or None), tiers=mix,
                            knowledge=args.knowledge)
            title = f"philly (limit {args.limit or 'none'})"
        else:
            cfg, title = SimConfig(trace=workload, policies=policies, seed=args.seed, tiers=mix,
                                   knowledge=args.knowledge), workload
        for text in args.reservations.split(";"):
            reservation = None if text == "none" else Reservation.parse(text, args.seed)
            print(table(f"{title}, reservation {text}", replace(cfg, reservation=reservation), args.last), flush=True)
            print()


if __name__ == "__main__":
    main()
