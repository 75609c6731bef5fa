"""Control-plane load benchmark (not a test): API submissions and one scheduling pass.

1. 10,000 job submissions through the HTTP API of a real ``stint serve`` (SQLite, controller loop
   running), from 1 client and from 4 concurrent clients: submissions/s and p50/p99 latency.
2. One controller step (scheduling pass) over 10,000 queued jobs, in-process: store -> ClusterView
   -> policy.plan -> reconcile -> intents, for each policy given.

Usage: .venv/bin/python benchmarks/runtime_load.py [--jobs 10000] [--policies fifo,srtf]
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


def submissions(n: int, clients: int, root: Path) -> tuple[float, list[float]]:
    serve = ServeProc(root / "data", f"sqlite:///{root / 'stint.db'}")
    serve.start()
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(count: int) -> None:
        with serve.client() as c:
            mine = []
            for _ in range(count):
                t0 = time.perf_counter()
                c.submit(**JOB)
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
        assert stored == len(latencies), f"{stored} jobs stored, {len(latencies)} submitted"
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    return len(latencies) / wall, latencies


def scheduling_pass(n: int, policy: str, root: Path) -> tuple[float, float, float]:
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
    first = ctl.step(float(n))  # starts the first job, queues the rest
    t1 = time.perf_counter()
    second = ctl.step(float(n) + 1)  # a pass with nothing to change
    t2 = time.perf_counter()
    for jid in executor.running():
        executor.kill(jid)
    assert len(first.launched) == 1 and not second.launched
    return t1 - t0, t2 - t1, second.plan_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--policies", default="fifo")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        for clients in (1, 4):
            rate, lat = submissions(args.jobs, clients, root / f"c{clients}")
            q = statistics.quantiles(lat, n=100)
            print(f"submit  clients={clients}  n={len(lat)}  {rate:7.0f} /s  "
                  f"p50 {q[49] * 1e3:5.1f} ms  p99 {q[98] * 1e3:5.1f} ms  max {max(lat) * 1e3:6.1f} ms")
        for policy in args.policies.split(","):
            first, again, plan = scheduling_pass(args.jobs, policy, root)
            print(f"pass    policy={policy:<8} queued={args.jobs}  first step {first:.3f} s  "
                  f"next step {again:.3f} s  (policy.plan {plan * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
