"""The twin measured: real SDK jobs under `stint serve`, then `stint replay` of the same run.

Usage: PYTHONPATH=src .venv/bin/python benchmarks/twin_live.py [--jobs 36] [--min-s 20]
       [--max-s 120] [--gap-s 6] [--sleep 0.5] [--policies fifo,tiresias,singularity,oasis]
       [--seed 1] [--out DIR]

Per policy: a fresh `stint serve` (local executor, a virtual cluster of 2 nodes x 4 GPUs, SQLite)
gets a seeded workload of `--jobs` SDK jobs (examples/mlp.py, `--sleep` seconds a step, so a
job of L seconds runs L / sleep steps; L log-uniform in [min-s, max-s]; 1, 2 or 4 GPUs; tiers
premium / standard / basic 1 : 3 : 2; Poisson arrivals, mean gap `--gap-s`), declared with its
length (`est_s` = L) and steps. While it runs, the benchmark records each job's first estimated
start the control plane shows (`est_start_at`, a job started at once: its submission) and the
naive estimate at its submission (the waiting jobs ahead of it over the completions per second
so far; before any completion: the declared GPU-seconds running and waiting over the GPUs), and
the estimated start a dry run of the same submission (`POST /v1/jobs/dry-run`) gave just before.
When every job has ended, the store is replayed (`runtime/twin.py`, what `stint replay` runs)
and the benchmark prints, per policy: mean JCT and p99 wait live and simulated and their
deviation, with each attempt's measured costs (the replay) and with the fitted cost model
alone (what `stint sim --costs-from` predicts); whether the decision sequences are identical and
their agreement; and the start estimates' median absolute and signed error relative to the
actual wait (jobs that waited at least 5 s), against the naive estimate's, and the dry run's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from stint.runtime.client import Client
from stint.runtime.measured import open_store
from stint.runtime.twin import compare, load

ROOT = Path(__file__).resolve().parents[1]
MLP = str(ROOT / "examples" / "mlp.py")
OPTIONS = {  # sized for a workload of minutes on 8 GPUs
    "fifo": [],
    "tiresias": ["thresholds_gpu_s=120", "tick_s=5"],
    "singularity": [],
    "oasis": ["slot_s=10", "horizon_slots=90"],
}
TIERS = ["premium", "standard", "standard", "standard", "basic", "basic"]


@dataclass(frozen=True, slots=True)
class Sub:
    at_s: float
    gpus: int
    length_s: float
    tier: str


def workload(n: int, lo: float, hi: float, gap: float, seed: int) -> list[Sub]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(Sub(round(t, 2), rng.choice((1, 1, 1, 2, 2, 4)),
                       round(lo * (hi / lo) ** rng.random(), 1), rng.choice(TIERS)))
        t += rng.expovariate(1.0 / gap)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(data: Path, policy: str, port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-c", "from stint.cli import main; main()", "serve", "--data-dir",
           str(data), "--port", str(port), "--nodes", "2", "--gpus-per-node", "4", "--policy",
           policy, "--log-level", "warning"]
    for opt in OPTIONS[policy]:
        cmd += ["--policy-opt", opt]
    data.mkdir(parents=True)
    log = (data.parent / "serve.log").open("ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"stint serve exited: {(data.parent / 'serve.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("stint serve did not answer")


def naive(jobs: list[dict[str, Any]], now: float, t0: float, done: int) -> float:
    """Queue depth over throughput: the waiting jobs over completions per second so far."""
    waiting = [j for j in jobs if j["state"] in ("queued", "preempted")]
    if done:
        return len(waiting) / (done / max(1e-9, now - t0))
    busy = sum((j["est_s"] or 0.0) * j["gpus"] for j in jobs if j["state"] not in (
        "succeeded", "failed", "cancelled", "rejected"))
    return busy / 8.0


def run_policy(policy: str, subs: list[Sub], sleep: float, base: Path) -> dict[str, Any]:
    port = free_port()
    data = base / policy / "data"
    proc = serve(data, policy, port)
    token = (data / "admin.token").read_text().strip()
    predicted: dict[int, float] = {}
    naive_at: dict[int, float] = {}
    dry_at: dict[int, float] = {}  # the dry run's estimated start, just before the submission
    try:
        with Client(f"http://127.0.0.1:{port}", token) as c:
            t0 = time.time()
            pending = list(subs)
            while True:
                now = time.time()
                while pending and t0 + pending[0].at_s <= now:
                    s = pending.pop(0)
                    steps = max(2, round(s.length_s / sleep))
                    before = c.jobs()
                    done = sum(1 for j in before if j["state"] == "succeeded")
                    body = {"command": [sys.executable, MLP, "--steps", str(steps), "--sleep",
                                        str(sleep)], "gpus": s.gpus, "tier": s.tier,
                            "est_s": s.length_s, "total_steps": steps}
                    dry = c.call("POST", "/v1/jobs/dry-run", json=body)
                    job = c.submit(**body)
                    naive_at[job["id"]] = time.time() + naive(before, now, t0, done)
                    if dry["est_start_at"] is not None:
                        dry_at[job["id"]] = dry["est_start_at"]
                rows = c.jobs()
                for j in rows:
                    if j["id"] in predicted:
                        continue
                    if j["state"] in ("queued", "preempted") and j["est_start_at"] is not None:
                        predicted[j["id"]] = j["est_start_at"]
                    elif j["first_start_at"] is not None:
                        predicted[j["id"]] = j["submitted_at"]  # started before any estimate
                if not pending and all(j["state"] in ("succeeded", "failed", "rejected",
                                                      "cancelled") for j in rows):
                    break
                time.sleep(0.5)
            rows = c.jobs()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    store = open_store(str(data))
    try:
        report = compare(load(store), policy, OPTIONS[policy])
    finally:
        store.close()
    (base / policy / "replay.json").write_text(json.dumps(report.as_dict(), indent=2))
    return {"policy": policy, **report.totals, **errors(rows, predicted, naive_at, dry_at),
            "failed": sum(1 for j in rows if j["state"] != "succeeded")}


def errors(rows: list[dict[str, Any]], predicted: dict[int, float], naive_at: dict[int, float],
           dry_at: dict[int, float]) -> dict[str, float | int | None]:
    """Median absolute and signed start error over the actual wait: the control plane's first
    estimate, the naive one, and the dry run's just before the submission."""
    ours_signed, theirs_signed, dry_signed = [], [], []
    for j in rows:
        start = j["first_start_at"]
        if start is None or j["id"] not in predicted:
            continue
        wait = start - j["submitted_at"]
        if wait < 5.0:
            continue
        ours_signed.append((predicted[j["id"]] - start) / wait)
        theirs_signed.append((naive_at[j["id"]] - start) / wait)
        if j["id"] in dry_at:
            dry_signed.append((dry_at[j["id"]] - start) / wait)
    ours = [abs(x) for x in ours_signed]
    theirs = [abs(x) for x in theirs_signed]

    def med(xs: list[float]) -> float | None:
        return 100.0 * statistics.median(xs) if xs else None

    return {"waited": len(ours), "est_abs_err_pct": med(ours), "est_signed_err_pct": med(ours_signed),
            "naive_abs_err_pct": med(theirs), "naive_signed_err_pct": med(theirs_signed),
            "dry_abs_err_pct": med([abs(x) for x in dry_signed]),
            "dry_signed_err_pct": med(dry_signed)}


def _f(x: object, pct: bool = False) -> str:
    if not isinstance(x, float | int) or isinstance(x, bool) or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:+.1f} %" if pct else f"{x:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=36)
    p.add_argument("--min-s", type=float, default=20.0)
    p.add_argument("--max-s", type=float, default=120.0)
    p.add_argument("--gap-s", type=float, default=6.0)
    p.add_argument("--sleep", type=float, default=0.5)
    p.add_argument("--policies", default="fifo,tiresias,singularity,oasis")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="keep each run's store and replay here")
    args = p.parse_args()
    subs = workload(args.jobs, args.min_s, args.max_s, args.gap_s, args.seed)
    print(f"{args.jobs} jobs of {args.min_s:g}-{args.max_s:g} s, mean gap {args.gap_s:g} s, "
          f"{args.sleep:g} s a step, 2 x 4 GPUs; load {os.getloadavg()[0]:.1f} at start", flush=True)
    out = []
    with tempfile.TemporaryDirectory(prefix="stint-twin-") as tmp:
        base = args.out or Path(tmp)
        for policy in args.policies.split(","):
            t = time.monotonic()
            got = run_policy(policy, subs, args.sleep, base)
            got["wall_s"] = time.monotonic() - t
            out.append(got)
            print(json.dumps(got), flush=True)
    print("\npolicy       mean JCT live/sim (dev)  fitted dev  p99 wait live/sim (dev)  fitted dev  "
          "decisions             est err |abs| (signed)  naive |abs| (signed)  dry run |abs| (signed)")
    for g in out:
        dec = "identical" if g["decisions_identical"] else f"agree {g['decision_agreement']:.2f}"
        fdec = "identical" if g["fitted_decisions_identical"] else f"{g['fitted_decision_agreement']:.2f}"
        print(f"{g['policy']:<12} {_f(g['mean_jct_live_s'])}/{_f(g['mean_jct_sim_s'])} "
              f"({_f(g['mean_jct_deviation_pct'], True)})  {_f(g['fitted_mean_jct_deviation_pct'], True)}"
              f"  {_f(g['p99_wait_live_s'])}/{_f(g['p99_wait_sim_s'])} ({_f(g['p99_wait_deviation_pct'], True)})"
              f"  {_f(g['fitted_p99_wait_deviation_pct'], True)}  {dec} ({g['decisions_live']}; fitted {fdec})"
              f"  {_f(g['est_abs_err_pct'])} ({_f(g['est_signed_err_pct'], True)}), n={g['waited']}"
              f"  {_f(g['naive_abs_err_pct'])} ({_f(g['naive_signed_err_pct'], True)})"
              f"  {_f(g['dry_abs_err_pct'])} ({_f(g['dry_signed_err_pct'], True)})"
              + (f"  [{g['failed']} not succeeded]" if g["failed"] else ""))


if __name__ == "__main__":
    main()
