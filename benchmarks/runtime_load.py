"""Control-plane load benchmark (not a test): API submissions and one scheduling pass.

1. 10,000 job submissions through the HTTP API of a real ``stint serve`` (SQLite, controller loop
   running), from 1 client and from 4 concurrent clients: submissions/s and p50/p99 latency.
2. One controller step (scheduling pass) over 10,000 queued jobs, in-process: store -> ClusterView
   -> policy.plan -> reconcile -> intents, for each policy given.

Usage: .venv/bin/python benchmarks/runtime_load.py [--jobs 10000] [--policies fifo,tiresias]
       [--only submit|pass] [--tick 0.1]
``GET /v1/health`` through the same server and client is printed first as a baseline: the machine
is shared and noisy, so the ratio submit/health is the steadier figure.
Every submitted job needs the whole 4-GPU cluster and runs `sleep`, so one job runs and the rest
queue; the benchmark kills what it started.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime"))

from rt_helpers import ServeProc, kill_leftover_workers

JOB = {"command": ["sleep", "600"], "gpus": 4}


def submissions(n: int, clients: int, root: Path, path: str = "/v1/jobs",
                tick: float = 0.1) -> tuple[float, list[float]]:
    serve = ServeProc(root / "data", f"sqlite:///{root / 'stint.db'}", "--tick", str(tick))
    serve.start()
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(count: int) -> None:
        with serve.client() as c:
            mine = []
            for _ in range(count):
                t0 = time.perf_counter()
                if path == "/v1/jobs":
                    c.submit(**JOB)
                else:  # the baseline: same server, client and HTTP stack, no store, no auth
                    c.call("GET", path)
                mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    try:
        threads = [threading.Thread(target=worker, args=(n // clients,)) for _ in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        with serve.client() as c:
            stored = len(c.jobs())
        if path == "/v1/jobs":
            assert stored == len(latencies), f"{stored} jobs stored, {len(latencies)} submitted"
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    return len(latencies) / wall, latencies


def scheduling_pass(n: int, policy: str, root: Path) -> dict[str, float]:
    from stint.policies import make
    from stint.runtime.controller import Controller, ControllerConfig
    from stint.runtime.executor.local import LocalExecutor
    from stint.runtime.store import NewJob, Store

    store = Store(f"sqlite:///{root / f'pass-{policy}.db'}")
    store.migrate()
    caller = store.caller_for_token(store.create_token("bench", 0.0))
    assert caller is not None
    spec = NewJob("q", ["sleep", "600"], 4, 4, 4, "standard", 1.0, None)
    for i in range(n):
        store.add_job(spec, caller, float(i))
    executor = LocalExecutor(root / f"ex-{policy}", nodes=2, gpus_per_node=2)
    ctl = Controller(store, executor, make(policy), ControllerConfig(jobs_dir=root / "jobs"))
    t0 = time.perf_counter()
    first = ctl.step(float(n))  # cold: loads every row, starts the first job, queues the rest
    t1 = time.perf_counter()
    ctl.cache.invalidate()  # a full pass again (reload + rebuild), now with nothing to start
    t2 = time.perf_counter()
    full = ctl.step(float(n) + 1)
    t3 = time.perf_counter()
    ctl._dirty = True  # an incremental pass (as after any change), nothing to start
    t4 = time.perf_counter()
    incr = ctl.step(float(n) + 2)
    t5 = time.perf_counter()
    for jid in executor.running():
        executor.kill(jid)
    assert len(first.launched) == 1 and not full.launched and not incr.launched
    return {"cold step (launches 1)": t1 - t0, "full pass": t3 - t2,
            "full pass policy.plan": full.plan_s, "incremental pass": t5 - t4}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--policies", default="fifo,tiresias")
    ap.add_argument("--only", choices=["submit", "pass"], default=None)
    ap.add_argument("--tick", type=float, default=0.1,
                    help="controller period of the served control plane (stint serve's default: 0.5)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        runs = [] if args.only == "pass" else [(1, "/v1/health"), (1, "/v1/jobs"), (4, "/v1/jobs")]
        for clients, path in runs:
            rate, lat = submissions(args.jobs, clients, root / f"c{clients}{path[4:8]}", path,
                                    args.tick)
            q = statistics.quantiles(lat, n=100)
            print(f"{'GET ' + path if path != '/v1/jobs' else 'submit':<15} clients={clients}  "
                  f"n={len(lat)}  {rate:7.0f} /s  p50 {q[49] * 1e3:5.1f} ms  "
                  f"p99 {q[98] * 1e3:5.1f} ms  max {max(lat) * 1e3:6.1f} ms", flush=True)
        for policy in [] if args.only == "submit" else args.policies.split(","):
            times = scheduling_pass(args.jobs, policy, root)
            print(f"pass  policy={policy:<9} queued={args.jobs}  " + "  ".join(
                f"{k} {v:.3f} s" for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
