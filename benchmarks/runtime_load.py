"""Control-plane load benchmark (not a test): API submissions and one scheduling pass.

1. 10,000 job submissions through the HTTP API of a real ``stint serve`` (SQLite, controller loop
   running), from 1 client and from 4 concurrent clients: submissions/s and p50/p99 latency.
2. Controller steps (scheduling passes) over 10,000 queued jobs, in-process: store -> ClusterView
   -> policy.plan -> reconcile -> intents, for each policy given (``scheduling_pass``), and the
   store's admission latency at depth 0 and at that depth.
3. ``--only keepalive``: requests/s on one kept-alive connection (``http.client``, one request at
   a time), ``GET /v1/health`` and the ``POST /v1/jobs`` of ``stint submit`` (SQLite), against a
   bare FastAPI app with the same two routes served by the same uvicorn (h11, asyncio, its own
   listening socket), in one run; the ratio stint/bare is the figure to compare (a connection
   whose answers wait for delayed ACKs shows as ~20 requests/s). Requests alternate between the
   two servers so that a load change on a shared machine hits both.

4. ``--only clients``: submissions from 1 and 8 clients, each its own process with one kept-alive
   ``http.client`` connection, to a real ``stint serve`` on SQLite and on PostgreSQL
   (``--pg URL``, a fresh schema per run): submissions/s, p50/p99, and the server's CPU time per
   submission (its ``/proc`` utime + stime over the run) and the client processes' own CPU per
   submission. First, as the floor a submission cannot go below, ``GET /v1/health`` from the
   same clients to ``stint serve`` and to the bare app of 3. (same uvicorn, its own process):
   rates, server CPU per request and the ratio stint/bare. ``--trees NAME=SRC,...`` serves from
   each source tree in turn (``PYTHONPATH``) in the same run: before and after a change.

5. ``--only array``: one ``POST /v1/arrays`` of ``--jobs`` tasks (default 10,000) to a real
   ``stint serve`` on SQLite and on PostgreSQL: seconds until it is accepted (all committed).

Usage: .venv/bin/python benchmarks/runtime_load.py [--jobs 10000] [--policies fifo,tiresias]
       [--only submit|pass|keepalive|clients] [--tick 0.1] [--clients 1,8] [--trees ...]
``GET /v1/health`` through the same server and client is printed first as a baseline: the machine
is shared and noisy, so the ratio submit/health is the steadier figure.
Every submitted job needs the whole 4-GPU cluster and runs `sleep`, so one job runs and the rest
queue; the benchmark kills what it started.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, FastAPI  # the bare app's; its routes' annotations resolve here

_TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(_TESTS / "runtime"), str(_TESTS)]  # rt_helpers imports the shared builders

from rt_helpers import ServeProc, free_port, kill_leftover_workers, peer_nodelay, wait_for

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


def serve_bare(port: int) -> None:
    """The baseline server: a FastAPI app with stint's two routes and nothing behind them (no
    store, no auth, no controller), served by uvicorn as its docs show (uvicorn binds)."""
    import uvicorn

    app = FastAPI()
    ids = iter(range(1, 1 << 62))

    @app.get("/v1/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/jobs", status_code=201)
    def submit(body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        return {"id": next(ids), **body}

    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")).run()


@contextmanager
def bare_app(log: Path) -> Iterator[tuple[int, int]]:
    """The bare app in its own process (as ``stint serve`` is): its port and pid."""
    port = free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, __file__, "--serve-bare", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        def up() -> bool:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/v1/health")
                return conn.getresponse().status == 200
            except OSError:
                return False
        wait_for(up, 60, "the bare app to answer")
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


class Conn:
    """One kept-alive ``http.client`` connection; ``once`` sends one request and keeps its
    latency."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = headers
        self.latencies: list[float] = []
        self.sock: socket.socket | None = None

    def once(self, method: str, path: str, body: bytes | None, status: int) -> None:
        t0 = time.perf_counter()
        self.http.request(method, path, body, self.headers)
        r = self.http.getresponse()
        answer = r.read()
        self.latencies.append(time.perf_counter() - t0)
        assert r.status == status, (path, r.status, answer[:500])
        assert not r.will_close, f"{path}: the server closed the connection"
        assert self.sock is None or self.http.sock is self.sock, f"{path}: reconnected"
        self.sock = self.http.sock

    def figures(self, pid: int) -> str:
        """Requests/s over the time spent in its own requests, latencies, and whether the
        server's end of the connection has TCP_NODELAY."""
        assert self.sock is not None
        q = statistics.quantiles(self.latencies, n=100)
        return (f"{self.rate():6.0f} /s (p50 {q[49] * 1e3:4.1f} ms, p99 {q[98] * 1e3:5.1f} ms, "
                f"server TCP_NODELAY {int(peer_nodelay(pid, self.sock))})")

    def rate(self) -> float:
        return len(self.latencies) / sum(self.latencies)


def keepalive(n: int, root: Path, tick: float) -> None:
    """``n`` requests of each kind (``n`` jobs: 10,000 is a user's default limit) on one
    connection to each server, alternating request by request between the servers (neither
    connection idles past uvicorn's keep-alive timeout, and a load change on a shared machine
    hits both alike)."""
    serve = ServeProc(root / "data", f"sqlite:///{root / 'stint.db'}", "--tick", str(tick))
    serve.start()
    token = (serve.data_dir / "admin.token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = json.dumps(JOB).encode()
    warm = 20
    try:
        with bare_app(root / "bare.log") as (bare_port, bare_pid):
            assert serve.proc is not None
            servers = {"stint": (serve.port, serve.proc.pid), "bare": (bare_port, bare_pid)}
            for what, method, path, payload, status in (
                    ("GET /v1/health", "GET", "/v1/health", None, 200),
                    ("POST /v1/jobs", "POST", "/v1/jobs", body, 201)):
                conns = {name: Conn(port, auth) for name, (port, _) in servers.items()}
                for i in range(n):  # the first ones warm up the connection and the route
                    if i == warm:
                        for c in conns.values():
                            c.latencies = []
                    for c in conns.values():
                        c.once(method, path, payload, status)
                ratio = conns["stint"].rate() / conns["bare"].rate()
                print(f"keep-alive {what:<15} n={n} (timed: the last {n - warm})  " + "  ".join(
                    f"{name} {c.figures(servers[name][1])}" for name, c in conns.items()) +
                      f"  stint/bare {ratio:.2f}", flush=True)
                for c in conns.values():
                    c.http.close()
        with serve.client() as client:
            stored = len(client.jobs())
        assert stored == n, f"{stored} jobs stored, {n} submitted"
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)


def client_main(port: int, token: str, n: int, go: str, out: str, path: str = "/v1/jobs") -> None:
    """One client process: connect, write ``<out>.ready``, wait for the file ``go`` (so that
    every client starts together), then ``n`` requests one at a time on its kept-alive
    connection (``POST /v1/jobs``, or ``GET path``); latencies and its own CPU time over them
    to ``out``."""
    conn = Conn(port, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    body = json.dumps(JOB).encode()
    conn.once("GET", "/v1/health", None, 200)  # connected before the clock starts
    conn.latencies = []
    Path(out + ".ready").touch()
    idle_since = time.monotonic()
    while not Path(go).exists():
        time.sleep(0.002)
        if time.monotonic() - idle_since > 2.0:  # within the server's keep-alive timeout (5 s)
            conn.once("GET", "/v1/health", None, 200)
            idle_since = time.monotonic()
    conn.latencies = []
    cpu0 = time.process_time()
    for _ in range(n):
        if path == "/v1/jobs":
            conn.once("POST", "/v1/jobs", body, 201)
        else:
            conn.once("GET", path, None, 200)
    cpu = time.process_time() - cpu0
    Path(out).write_text(json.dumps({"end": time.time(), "latencies": conn.latencies, "cpu": cpu}))


@dataclass(frozen=True)
class ClientsRun:
    rate: float  # requests/s over the run's wall time
    latencies: list[float]
    server_cpu_s: float  # the server's utime + stime over the run
    client_cpu_s: float  # every client process's own CPU over its requests


def drive(port: int, token: str, pid: int, n: int, clients: int, root: Path,
          path: str = "/v1/jobs") -> ClientsRun:
    """``n`` requests from ``clients`` client processes, started together, to the server at
    ``port`` (process ``pid``)."""
    root.mkdir(parents=True, exist_ok=True)
    go = root / f"go{path.replace('/', '-')}"
    outs = [root / f"client{path.replace('/', '-')}-{i}.json" for i in range(clients)]
    procs = [subprocess.Popen([sys.executable, __file__, "--client", str(port), token,
                               str(n // clients), str(go), str(out), path]) for out in outs]
    wait_for(lambda: all(Path(f"{o}.ready").exists() for o in outs), 300, "the clients")
    cpu0 = cpu_s(pid)
    start_at = time.time()
    go.touch()
    for p in procs:
        assert p.wait(1800) == 0, "a client failed"
    cpu1 = cpu_s(pid)
    got = [json.loads(o.read_text()) for o in outs]
    lat = [x for g in got for x in g["latencies"]]
    wall = max(g["end"] for g in got) - start_at
    return ClientsRun(len(lat) / wall, lat, cpu1 - cpu0, sum(g["cpu"] for g in got))


def cpu_s(pid: int) -> float:
    """utime + stime of a process, all its threads, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def pg_schema(base: str) -> Iterator[str]:
    """A fresh PostgreSQL schema for one run (dropped afterwards): its URL."""
    import uuid

    import psycopg

    schema = f"stint_bench_{uuid.uuid4().hex[:12]}"
    plain = base.replace("+psycopg", "")
    with psycopg.connect(plain, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{base}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(plain, autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def started_serve(root: Path, db_url: str, src: str | None, tick: float) -> tuple[ServeProc, str]:
    """A fresh ``stint serve`` on ``db_url`` (from the tree ``src``, if given) and its admin token."""
    serve = ServeProc(root / "data", db_url, "--tick", str(tick))
    if src is not None:
        serve.env = {**os.environ, "PYTHONPATH": src}
    serve.start()
    return serve, (serve.data_dir / "admin.token").read_text().strip()


def client_run(n: int, clients: int, root: Path, db_url: str, src: str | None,
               tick: float) -> str:
    """``n`` submissions from ``clients`` client processes to a fresh ``stint serve``."""
    serve, token = started_serve(root, db_url, src, tick)
    assert serve.proc is not None
    try:
        run = drive(serve.port, token, serve.proc.pid, n, clients, root)
        with serve.client() as c:
            stored = len(c.jobs())
        assert stored == len(run.latencies), f"{stored} jobs stored, {len(run.latencies)} submitted"
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    lat = run.latencies
    q = statistics.quantiles(lat, n=100)
    return (f"n={len(lat)}  {run.rate:6.0f} /s  p50 {q[49] * 1e3:5.1f} ms  "
            f"p99 {q[98] * 1e3:6.1f} ms  server CPU {run.server_cpu_s / len(lat) * 1e3:.2f} "
            f"ms/submission  clients' CPU {run.client_cpu_s / len(lat) * 1e3:.2f} ms/submission")


def health_run(n: int, clients: int, root: Path, src: str | None, tick: float) -> str:
    """``GET /v1/health`` from ``clients`` client processes to ``stint serve`` (SQLite) and to
    the bare app, one after the other: rates, server CPU per request, and the ratio."""
    serve, token = started_serve(root, f"sqlite:///{root / 'stint.db'}", src, tick)
    assert serve.proc is not None
    try:
        stint = drive(serve.port, token, serve.proc.pid, n, clients, root / "stint", "/v1/health")
        with bare_app(root / "bare.log") as (port, pid):
            bare = drive(port, token, pid, n, clients, root / "bare", "/v1/health")
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)

    def line(name: str, r: ClientsRun) -> str:
        q = statistics.quantiles(r.latencies, n=100)
        return (f"{name} {r.rate:6.0f} /s (p99 {q[98] * 1e3:5.1f} ms, server CPU "
                f"{r.server_cpu_s / len(r.latencies) * 1e3:.2f} ms/request)")

    return f"n={n}  {line('stint', stint)}  {line('bare', bare)}  stint/bare {stint.rate / bare.rate:.2f}"


def clients_bench(n: int, root: Path, counts: list[int], trees: list[tuple[str, str | None]],
                  pg: str | None, tick: float) -> None:
    """Every (database, clients) row for each tree, the trees interleaved row by row."""
    for clients in counts:  # the HTTP stack alone: what a submission cannot go below
        for name, src in trees:
            line = health_run(n, clients, root / f"health-{clients}-{name}", src, tick)
            print(f"health            clients={clients}  tree={name:<7} {line}", flush=True)
    dbs = ["sqlite"] + (["postgresql"] if pg else [])
    for db in dbs:
        for clients in counts:
            for name, src in trees:
                where = root / f"{db}-{clients}-{name}"
                if db == "sqlite":
                    line = client_run(n, clients, where, f"sqlite:///{where / 'stint.db'}", src, tick)
                else:
                    assert pg is not None
                    with pg_schema(pg) as url:
                        line = client_run(n, clients, where, url, src, tick)
                print(f"submit {db:<10} clients={clients}  tree={name:<7} {line}", flush=True)


def array_accept(n: int, root: Path, pg: str | None, tick: float) -> None:
    """Seconds to accept one array of ``n`` tasks, SQLite and PostgreSQL, fresh servers."""
    def one(where: Path, url: str) -> float:
        serve = ServeProc(where / "data", url, "--tick", str(tick))
        serve.start()
        try:
            with serve.client() as c:
                t0 = time.perf_counter()
                got = c.submit_array(f"0-{n - 1}", None, command=["sleep", "60{i}"], gpus=4)
                took = time.perf_counter() - t0
                assert got["tasks"] == n and len(c.array_jobs(got["array_id"])) == n
        finally:
            serve.stop()
            kill_leftover_workers(serve.data_dir)
        return took

    sqlite = f"sqlite:///{root / 'arr.db'}"
    print(f"array  sqlite     tasks={n}  accepted in {one(root / 'arr-sqlite', sqlite):.2f} s",
          flush=True)
    if pg:
        with pg_schema(pg) as url:
            print(f"array  postgresql tasks={n}  accepted in {one(root / 'arr-pg', url):.2f} s",
                  flush=True)


def scheduling_pass(n: int, policy: str, root: Path) -> dict[str, float]:
    """One controller over ``n`` queued jobs (stored as arrays of 10,000 tasks, one transaction
    each: the setup, not timed), its steps timed: the cold step, a full pass (reload + rebuild),
    an incremental pass (nothing new), a pass after one submission (the policy is asked), and a
    restarted controller's first pass (reload, every job's status, the policy over all); then
    the store's admission latency (``add_job``, median of 200) at depth 0 and at depth ``n``."""
    from stint.policies import make
    from stint.runtime.controller import Controller, ControllerConfig
    from stint.runtime.executor.local import LocalExecutor
    from stint.runtime.store import NewJob, Store

    store = Store(f"sqlite:///{root / f'pass-{policy}.db'}")
    store.migrate()
    caller = store.caller_for_token(store.create_token("bench", 0.0))
    assert caller is not None
    spec = NewJob("q", ["sleep", "600"], 4, 4, 4, "standard", 1.0, None)
    at_0 = admission(store, spec, caller, 0.0)
    for i, lo in enumerate(range(0, n, 10_000)):
        store.add_array(spec, caller, float(i + 1), range(lo, min(n, lo + 10_000)))
    executor = LocalExecutor(root / f"ex-{policy}", nodes=2, gpus_per_node=2)
    config = ControllerConfig(jobs_dir=root / "jobs")
    ctl = Controller(store, executor, make(policy), config)
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
    store.add_job(spec, caller, float(n) + 3)  # a submission: the policy is asked
    t6 = time.perf_counter()
    asked = ctl.step(float(n) + 3)
    t7 = time.perf_counter()
    again = Controller(store, executor, make(policy), config)  # a restart (same workers)
    t8 = time.perf_counter()
    restart = again.step(float(n) + 4)
    t9 = time.perf_counter()
    at_n = admission(store, spec, caller, float(n) + 5)
    for jid in executor.running():
        executor.kill(jid)
    assert len(first.launched) == 1 and not full.launched and not incr.launched
    assert not asked.launched and not restart.launched
    return {"cold step (launches 1)": t1 - t0, "full pass": t3 - t2,
            "full pass policy.plan": full.plan_s, "incremental pass": t5 - t4,
            "pass after a submission": t7 - t6, "its policy.plan": asked.plan_s,
            "restart pass": t9 - t8, "restart policy.plan": restart.plan_s,
            "admission at depth 0": at_0, f"admission at depth {n}": at_n}


def admission(store: Any, spec: Any, caller: Any, now: float) -> float:
    """The median time of 200 ``Store.add_job`` calls (the API's insert of a submission)."""
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        store.add_job(spec, caller, now)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--policies", default="fifo,tiresias")
    ap.add_argument("--only", choices=["submit", "pass", "keepalive", "clients", "array"], default=None)
    ap.add_argument("--clients", default="1,8", help="--only clients: the client counts")
    ap.add_argument("--trees", default="", help="--only clients: NAME=SRC,... served in turn "
                    "(default: this interpreter's stint)")
    ap.add_argument("--pg", default="postgresql+psycopg://127.0.0.1:5432/test",
                    help="--only clients: a PostgreSQL database ('' for SQLite only)")
    ap.add_argument("--client", nargs=6, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--tick", type=float, default=0.1,
                    help="controller period of the served control plane (stint serve's default: 0.5)")
    ap.add_argument("--serve-bare", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_bare is not None:
        return serve_bare(args.serve_bare)
    if args.client is not None:
        port, token, n, go, out, path = args.client
        return client_main(int(port), token, int(n), go, out, path)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        if args.only == "keepalive":
            print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
            return keepalive(args.jobs, root / "keepalive", args.tick)
        if args.only == "array":
            print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
            return array_accept(args.jobs, root, args.pg or None, args.tick)
        if args.only == "clients":
            print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
            trees = [(t.split("=", 1)[0], t.split("=", 1)[1]) for t in args.trees.split(",") if t]
            return clients_bench(args.jobs, root, [int(c) for c in args.clients.split(",")],
                                 trees or [("this", None)], args.pg or None, args.tick)
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
                f"{k} {v * 1e3:.2f} ms" if k.startswith("admission") else f"{k} {v:.3f} s"
                for k, v in times.items()), flush=True)


if __name__ == "__main__":
    main()
