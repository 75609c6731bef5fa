"""Executor latencies, local vs Ray: launch -> worker running, and stop request -> exit reported.

    .venv/bin/python benchmarks/executor_latency.py [--repeats 10] [--workers 2]

For each backend, ``repeats`` times: launch one attempt of ``workers`` workers (one per node);
measure (a) how long ``launch()`` blocks, (b) launch -> every worker has run its first line (each
worker writes the time it started), (c) launch -> ``running()`` shows the attempt; then
``request_stop`` and measure (d) request -> ``poll()`` reports CHECKPOINTED (the workers trap
SIGUSR1 and exit 75). The baseline row is a bare ``subprocess.Popen`` of the same worker, for
ratios (the machine is shared and noisy, so ratios are the steadier figure). The Ray cluster is a
2-node ``LoopbackRayCluster`` started here; its start time is printed too.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stint.runtime.executor import Outcome, WorkerLaunch
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.executor.raycluster import LoopbackRayCluster
from stint.runtime.executor.supervised import SupervisedExecutor

WORKER = (
    "import os, signal, sys, time\n"
    "t = time.time()\n"
    "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(75))\n"
    "open(os.path.join(os.environ['STINT_CKPT_DIR'], os.environ['RANK'] + '.start'), 'w')"
    ".write(repr(t))\n"
    "while True: time.sleep(0.01)\n"
)


def gang(tmp: Path, job: str, n: int) -> list[WorkerLaunch]:
    (tmp / job).mkdir(parents=True)
    return [
        WorkerLaunch(job, 0, r, n, n, f"node-{r % 2}", (r // 2,), [sys.executable, "-c", WORKER],
                     str(tmp / job), str(tmp / "logs" / f"{job}.log"))
        for r in range(n)
    ]  # fmt: skip


def wait(pred, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.002)
    return time.time()


def measure(ex: SupervisedExecutor, tmp: Path, job: str, n: int) -> dict[str, float]:
    ws = gang(tmp, job, n)
    starts = [tmp / job / f"{r}.start" for r in range(n)]
    t0 = time.time()
    ex.launch(ws)
    t_launch = time.time()
    t_running = wait(lambda: ex.running().get(job) == 0)
    wait(lambda: all(p.exists() and p.read_text() for p in starts))
    t_first_line = max(float(p.read_text()) for p in starts)
    time.sleep(0.05)  # the handlers are installed before the start file is written
    t1 = time.time()
    ex.request_stop(job, grace_s=30)
    got: list = []
    t_exit = wait(lambda: got.extend(e for e in ex.poll() if e.job_id == job) or bool(got))
    assert got[0].outcome is Outcome.CHECKPOINTED, got[0]
    return {
        "launch() call": t_launch - t0,
        "launch -> first line": t_first_line - t0,
        "launch -> running()": t_running - t0,
        "stop -> exit reported": t_exit - t1,
    }


def baseline(tmp: Path, n: int) -> dict[str, float]:
    d = tmp / f"bare-{time.monotonic_ns()}"
    d.mkdir()
    env = {**os.environ, "STINT_CKPT_DIR": str(d)}
    t0 = time.time()
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER], env={**env, "RANK": str(r)})
        for r in range(n)
    ]
    wait(
        lambda: all(
            (d / f"{r}.start").exists() and (d / f"{r}.start").read_text() for r in range(n)
        )
    )
    first = max(float((d / f"{r}.start").read_text()) for r in range(n))
    time.sleep(0.05)
    t1 = time.time()
    for p in procs:
        p.send_signal(10)
    for p in procs:
        p.wait()
    return {"launch -> first line": first - t0, "stop -> exit reported": time.time() - t1}


def probe_cost(ex: SupervisedExecutor, tmp: Path, jobs: int, repeats: int = 20) -> dict[str, float]:
    """Median cost of running() and of an empty poll() with ``jobs`` live one-worker jobs."""
    names = [f"p{i}" for i in range(jobs)]
    for i, job in enumerate(names):
        w = gang(tmp, job, 1)[0]
        ex.launch([dataclasses.replace(w, node=f"node-{i % 2}", slots=(i // 2,))])
    wait(lambda: len(ex.running()) == jobs, timeout=300)
    out = {}
    for key, call in (("running()", ex.running), ("poll(), nothing ended", ex.poll)):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        out[key] = statistics.median(times)
    for job in names:
        ex.kill(job)
    wait(lambda: not ex.running() and (ex.poll() or True) and not ex.running(), timeout=120)
    ex.poll()
    return out


def summarize(name: str, rows: list[dict[str, float]]) -> dict[str, float]:
    med = {}
    for key in rows[0]:
        xs = sorted(r[key] for r in rows)
        med[key] = statistics.median(xs)
        p90 = xs[min(len(xs) - 1, int(0.9 * len(xs)))]
        print(f"| {name} | {key} | {1000 * med[key]:.0f} | {1000 * p90:.0f} |")
    return med


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--live-jobs", type=int, default=8, help="live jobs while timing probes")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stint-bench-"))
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| backend | measure | median ms | p90 ms |\n|---|---|---|---|")
    base = summarize("bare Popen", [baseline(tmp, args.workers) for _ in range(args.repeats)])
    local = LocalExecutor(tmp / "local-state", nodes=2, gpus_per_node=max(4, args.live_jobs))
    loc = summarize(
        "local", [measure(local, tmp / "local", f"j{i}", args.workers) for i in range(args.repeats)]
    )
    costs = {"local": probe_cost(local, tmp / "local-probe", args.live_jobs)}
    cluster = LoopbackRayCluster()
    os.environ.update(cluster.client_env())
    t0 = time.time()
    try:
        cluster.start(nodes=2, gpus_per_node=max(4, args.live_jobs))
        t_cluster = time.time() - t0
        from stint.runtime.executor.ray import RayExecutor

        rex = RayExecutor(tmp / "ray-state", cluster.address)
        ray_rows = [measure(rex, tmp / "ray", f"j{i}", args.workers) for i in range(args.repeats)]
        ray = summarize("ray", ray_rows)
        costs["ray"] = probe_cost(rex, tmp / "ray-probe", args.live_jobs)
        rex.close()
    finally:
        cluster.stop()
    print(f"\nRay cluster start (2 nodes): {t_cluster:.1f} s")
    print("ratios (median):")
    for key in ("launch -> first line", "stop -> exit reported"):
        print(
            f"  {key}: local/bare {loc[key] / base[key]:.2f}x, ray/local {ray[key] / loc[key]:.2f}x"
        )
    print(f"\nprobe cost with {args.live_jobs} live one-worker jobs (median of 20 calls):")
    for backend, c in costs.items():
        print("  " + backend + ": " + ", ".join(f"{k} {1000 * v:.1f} ms" for k, v in c.items()))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
