"""``stint serve``: the runtime edge. Owns the clock, the threads and the process; wires the store,
the executor, the policy, the controller loop and the HTTP server together."""

from __future__ import annotations

import getpass
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fastapi.responses import JSONResponse

from stint.config import ServeConfig, validate
from stint.policies.base import Policy
from stint.policies.registry import make_with_options
from stint.runtime.api import Who, must_be_admin
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.base import TERM_GRACE_S, Executor, NodeInfo
from stint.runtime.executor.make import make_executor
from stint.runtime.executor.shim import jobs_root
from stint.runtime.listen import listen
from stint.runtime.metrics import CONTENT_TYPE, Metrics
from stint.runtime.store import Store, StoreLocked, sqlite_url

if TYPE_CHECKING:
    from fastapi import FastAPI

    from stint.model.fleet import Fleet
    from stint.perf.types import TypeSpeeds
    from stint.policies.fleet.base import GlobalPolicy

log = logging.getLogger("stint.serve")


class StartupError(RuntimeError):
    """Why ``stint serve`` cannot start (printed as one line; exit status 2)."""


STORE_ID_FILE = "store-id"


def check_config(cfg: ServeConfig) -> Path:
    """The data directory, once every setting is in range (else a ``StartupError`` naming the
    setting's key)."""
    problem = validate(cfg)
    if problem is not None:
        raise StartupError(f"{problem[0]}: {problem[1]}")
    if cfg.store.data_dir is None:
        raise StartupError("store.data_dir is not set")
    return cfg.store.data_dir


def open_store(data_dir: Path, db: str | None) -> Store:
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)  # store, admin token, supervisors' state: ours alone
    store = Store(db or sqlite_url(data_dir))
    problem = store.integrity_problem()
    if problem is not None:
        store.close()
        raise StartupError(f"the store fails its integrity check ({problem}); restore it "
                           "from a backup")
    store.migrate()
    return store


def claim_dirs(data_dir: Path, jobs: Path, store_id: str, multi_user: bool,
               max_job_id: int) -> None:
    """Tie the data and jobs directories to this store: record its id in each, or refuse if a
    directory belongs to another store (or holds state of an unknown one), so job ids and job
    directories are never reused by a different job."""
    jobs_root(str(jobs), multi_user)
    for d, state in ((data_dir, data_dir / "executor" / "jobs"), (jobs, jobs)):
        path = d / STORE_ID_FILE
        try:
            known = path.read_text().strip()
        except FileNotFoundError:
            ids = [int(p.name) for p in state.iterdir() if p.name.isdigit()] if state.is_dir() else []
            if ids and max(ids) > max_job_id:  # (a directory from before store ids is adopted
                # when its jobs are this store's: none has an id the store has not given out)
                raise StartupError(f"{d} holds jobs this store never had (job {max(ids)}; it has "
                                   f"no {STORE_ID_FILE}); give this store a fresh directory"
                                   ) from None
            path.write_text(store_id + "\n")
            continue
        if known != store_id:
            raise StartupError(f"{d} belongs to store {known}, not to this store ({store_id}); "
                               "give each store its own --data-dir and --jobs-dir")


def reachable(path: Path) -> Path | None:
    """The first ancestor of ``path`` that other accounts cannot traverse, if any."""
    for d in [*reversed(path.parents), path]:
        if d.exists() and not d.stat().st_mode & 0o001:
            return d
    return None


class Steppable(Protocol):
    """What the loop drives: a ``Controller``, or a ``FleetControl`` over several."""

    def step(self, now: float) -> object: ...

    def recover(self, now: float) -> None: ...


@dataclass(slots=True)
class Plane:
    """What serve runs: the loop's body, every executor it drives, and (a fleet) each
    cluster's storage directory by name."""

    body: Steppable
    executors: list[Executor]
    storage: dict[str, Path] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None


def controller_config(cfg: ServeConfig, jobs_dir: Path,
                      forecast: Callable[[], Policy]) -> ControllerConfig:
    """A cluster's controller settings from the config (``[controller]``, ``[limits]``)."""
    ctl = cfg.controller
    return ControllerConfig(jobs_dir=jobs_dir, max_retries=ctl.max_retries, grace_s=ctl.grace_s,
                            forecast_policy=forecast, slow_step_s=ctl.slow_step_s,
                            hang_s=ctl.hang_s, retry_backoff_s=ctl.retry_backoff_s,
                            retry_backoff_max_s=ctl.retry_backoff_max_s, limits=cfg.limits,
                            multi_user=os.geteuid() == 0, policy_name=cfg.policy_name(),
                            policy_options=cfg.policy_options())


def single_plane(cfg: ServeConfig, data_dir: Path, store: Store, policy: Policy,
                 metrics: Metrics) -> Plane:
    ex = cfg.executor
    typed = typed_nodes(cfg)
    executor = make_executor(ex.kind, data_dir / "executor", ex.nodes, ex.gpus_per_node,
                             ex.ray_address, network=job_network(cfg),
                             node_list=typed[0] if typed else (), ports=ex.port_range())
    name, options = cfg.policy_name(), cfg.policy_options()
    ctl = controller_config(cfg, cfg.store.jobs_root(), lambda: make_with_options(name, options))
    if typed:
        ctl = replace(ctl, type_speeds=typed[1])
    controller = Controller(store, executor, policy, ctl, metrics)
    store.keep_clusters([""])
    return Plane(controller, [executor])


def typed_nodes(cfg: ServeConfig) -> tuple[list[NodeInfo], TypeSpeeds] | None:
    """The local executor's typed virtual nodes and speeds from ``[executor] cluster`` (None
    without one); a bad file is a ``StartupError`` naming the file and line."""
    ex = cfg.executor
    if ex.cluster is None:
        return None
    if ex.kind != "local":
        raise StartupError(f"--cluster gives a local executor's virtual nodes; executor {ex.kind!r} "
                           "has nodes of its own")
    from stint.model.cluster_file import ClusterFileError
    from stint.sim.cluster_input import read_cluster

    try:
        typed = read_cluster(ex.cluster)
    except ClusterFileError as exc:
        raise StartupError(str(exc)) from None
    nodes = [NodeInfo(n.name, int(n.capacity.gpu), n.gpu_type, n.role, n.capacity.cpu,
                      n.capacity.mem_gb) for n in typed.cluster.nodes]
    return nodes, typed.speeds


def load_fleet(cfg: ServeConfig) -> tuple[Fleet, GlobalPolicy] | None:
    """The fleet file and the global scheduler (None without ``--fleet``); a bad one is a
    ``StartupError`` naming the file, line and key."""
    from stint.model.fleet import FleetError, parse_fleet
    from stint.policies.fleet.registry import make_global

    fl = cfg.fleet
    if fl.file is None:
        return None
    try:
        fleet = parse_fleet(fl.file.read_text(), str(fl.file))
        return fleet, make_global(fl.global_policy, fl.global_options)
    except (FleetError, ValueError, OSError) as exc:
        raise StartupError(str(exc)) from None


def fleet_plane(cfg: ServeConfig, data_dir: Path, store: Store, metrics: Metrics, fleet: Fleet,
                global_policy: GlobalPolicy) -> Plane:
    """One controller per cluster of ``fleet`` (each with its executor, policy and storage), a
    copy service for each cluster that names none, and the global scheduler."""
    from stint.runtime.copy import start_storage
    from stint.runtime.fleet import FleetControl, Member
    from stint.runtime.fleet_secret import FILE_NAME, SecretError, ensure

    rays = [c.name for c in fleet.clusters if c.executor == "ray" or c.executor.startswith("ray://")]
    if len(rays) > 1:  # (ray.init connects a process to one cluster)
        raise StartupError(f"{cfg.fleet.file}: clusters {', '.join(rays)} each name a Ray executor; "
                           "one control plane drives at most one Ray cluster (run the others' "
                           "executors as stint agent executor --executor ray)")
    try:
        secret = ensure(data_dir / FILE_NAME)  # the agents' copies must match it
    except SecretError as exc:
        raise StartupError(str(exc)) from None
    members: dict[str, Member] = {}
    servers = []
    name, options = cfg.policy_name(), cfg.policy_options()

    def forecaster() -> Policy:  # each cluster forecasts its own jobs on its own nodes
        return make_with_options(name, options)

    for c in fleet.clusters:
        storage = Path(c.storage) if c.storage else cfg.store.jobs_root() / c.name
        jobs_root(str(storage), os.geteuid() == 0)  # (as the single cluster's jobs directory)
        copy = c.copy
        if not copy:
            server, copy = start_storage(storage, secret)
            servers.append(server)
        executor = make_executor(c.executor, data_dir / "executor" / c.name, c.nodes, c.gpus_per_node,
                                 secret=secret, name=c.name, network=job_network(cfg))
        controller = Controller(store, executor,
                                make_with_options(name, options),
                                controller_config(cfg, storage, forecaster),
                                metrics, member=c.name, region=c.region)
        members[c.name] = Member(controller, storage, copy)
    store.keep_clusters(list(members))
    body = FleetControl(store, fleet, members, global_policy, secret)

    def close() -> None:
        body.close()
        for server in servers:
            server.shutdown()

    return Plane(body, [m.controller.executor for m in members.values()],
                 {n: m.storage for n, m in members.items()}, close)


class ControlLoop(threading.Thread):
    """Steps the controller every ``tick_s`` seconds of wall-clock time until stopped.

    A step that raises (an executor or database error) is logged with its traceback and retried
    after a back-off that doubles per consecutive failure up to ``MAX_BACKOFF_S``. The store is the
    source of truth and every executor action is idempotent, so after a failed step the loop runs
    ``recover`` (as after a restart: re-adopt workers, apply missed exits, redo the intents the
    failed step committed but did not carry out) until it succeeds, then steps again.
    ``health()`` reports the loop's state (served at ``/v1/health/controller``), ``stuck`` while
    a step (or recovery) has run longer than ``stuck_step_s``, e.g. blocked on a job's file."""

    MAX_BACKOFF_S = 5.0

    def __init__(self, controller: Steppable, tick_s: float, stuck_step_s: float = 60.0) -> None:
        super().__init__(name="stint-controller", daemon=True)
        self.controller, self.tick_s, self.stuck_step_s = controller, tick_s, stuck_step_s
        self.running: tuple[str, float] | None = None  # the step in progress and its start
        self.stopping = threading.Event()
        self.steps = 0  # steps (and recoveries) that completed
        self.failures = 0  # failed attempts in total
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.last_ok_at: float | None = None
        self.recovered = False

    def health(self) -> dict[str, object]:
        """``ok`` once recovered and while the last step succeeded, ``stuck`` while a step has
        run over ``stuck_step_s`` (``detail`` says for how long), ``failing`` after a failure,
        ``starting`` before recovery completed, ``stopped`` when the thread is gone."""
        running, detail = self.running, None
        took = time.monotonic() - running[1] if running is not None else 0.0
        if not self.is_alive():
            status = "stopped"
        elif running is not None and took > self.stuck_step_s:
            status, detail = "stuck", f"{running[0]} running for {took:.0f} s"
        elif self.consecutive_failures:
            status = "failing"
        else:
            status = "ok" if self.recovered else "starting"
        return {"status": status, "detail": detail, "recovered": self.recovered,
                "steps": self.steps, "failures": self.failures,
                "consecutive_failures": self.consecutive_failures,
                "last_error": self.last_error, "last_ok_at": self.last_ok_at}

    def _attempt(self, what: str, action: Callable[[float], object]) -> bool:
        self.running = (what, time.monotonic())
        try:
            action(time.time())
        except Exception as exc:  # a bad step must not stop the control plane; the next one retries
            self.failures += 1
            self.consecutive_failures += 1
            self.last_error = f"{what}: {type(exc).__name__}: {exc}"
            log.exception("controller %s failed (%d in a row); retrying", what,
                          self.consecutive_failures)
            return False
        finally:
            self.running = None
        self.steps += 1
        self.consecutive_failures = 0
        self.last_ok_at = time.time()
        return True

    def _backoff(self) -> float:
        return min(self.MAX_BACKOFF_S, self.tick_s * 2.0 ** min(self.consecutive_failures, 16))

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            if not self.recovered:
                ok = self.recovered = self._attempt("recover", self.controller.recover)
            else:
                # A step that fails after committing its intents (e.g. the executor raised while
                # launching) leaves effects not carried out; nothing in a later step redoes them
                # (the store says STARTING, the worker does not exist). The recovery a restarted
                # control plane runs does: it reconciles the store with the executor. So a failed
                # step is followed by ``recover`` before stepping again.
                ok = self.recovered = self._attempt("step", self.controller.step)
            if not ok:
                self.stopping.wait(self._backoff())
                continue
            # Rest at least as long as the step took: the loop never takes over half of a core
            # (and of the GIL) from the API, however large the queue grows.
            self.stopping.wait(max(self.tick_s, time.monotonic() - started))


def add_metrics(app: FastAPI, metrics: Metrics) -> None:
    """``GET /metrics`` (no token, like the health routes: counts and latencies, no job of
    anyone's) and a histogram of every API request's latency."""
    from fastapi import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    class Timed:
        """Pure ASGI middleware (no task or stream per request, unlike ``@app.middleware``)."""

        def __init__(self, inner: ASGIApp) -> None:
            self.inner = inner

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await self.inner(scope, receive, send)
                return
            t0 = time.perf_counter()
            status = [0]

            async def sent(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            await self.inner(scope, receive, sent)
            route = scope.get("route")  # set by the router in this same scope
            path = getattr(route, "path", "other")  # the route's template, never the raw URL
            metrics.api_s.labels(scope["method"], path, str(status[0])).observe(
                time.perf_counter() - t0)

    app.add_middleware(Timed)

    def scrape() -> Response:
        return Response(metrics.text(), media_type=CONTENT_TYPE)

    app.add_api_route("/metrics", scrape, methods=["GET"], response_class=Response,
                      include_in_schema=False)


def add_health_route(app: FastAPI, loop: ControlLoop) -> None:
    """``GET /v1/health/controller`` (no token, like ``/v1/health``): the loop's ``health()``;
    503 unless its status is ``ok`` (``stuck``: a step has not finished for ``stuck_step_s``)."""
    from fastapi.responses import JSONResponse

    def controller_health() -> JSONResponse:
        body = loop.health()
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    app.add_api_route("/v1/health/controller", controller_health, methods=["GET"],
                      response_class=JSONResponse, response_model=None)


def add_drain_route(app: FastAPI, request: Callable[[], list[str]]) -> None:
    """``POST /v1/drain`` (admin): checkpoint and stop every job, then exit (``stint drain``);
    202 with the ids of the jobs being drained."""

    def drain(who: Who) -> dict[str, list[str]]:
        must_be_admin(who, "drain the control plane")
        return {"draining": request()}

    app.add_api_route("/v1/drain", drain, methods=["POST"], status_code=202)


def shut_down(loop: ControlLoop, executors: list[Executor], drain: bool, grace_s: float) -> None:
    """Stop the loop; with ``drain``, ask every running job to checkpoint and wait for it (up
    to the grace period and the SIGTERM escalation). Jobs left running are named in the log: by
    design they outlive the control plane, and the next ``stint serve`` re-adopts them. The
    drained jobs' exits are applied (they become preempted, then resume) at the next start."""
    loop.stopping.set()
    loop.join(timeout=10)

    def running() -> list[str]:
        return sorted(job for executor in executors for job in executor.running())

    left = running()
    if drain and left:
        log.warning("draining: %d job(s) asked to checkpoint and exit (grace %ss): %s",
                    len(left), grace_s, ", ".join(left))
        for executor in executors:
            for job in executor.running():
                executor.request_stop(job, grace_s)
        deadline = time.monotonic() + grace_s + TERM_GRACE_S + 5.0
        while (left := running()) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not left:
            log.warning("drained: every job stopped; their checkpoints resume when stint serve "
                        "starts again")
    if left:
        log.warning("stopping with %d job(s) still running, by design (a restarted stint serve "
                    "re-adopts them; stint drain or serve --drain stops them first): %s",
                    len(left), ", ".join(left))
    elif not drain:
        log.warning("stopping; no job is running")


def _terminated(_sig: int, _frame: object) -> None:
    raise SystemExit(0)


def _listen(host: str, port: int) -> socket.socket:
    try:
        sock = listen(host, port)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise StartupError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def _prepare(cfg: ServeConfig, data_dir: Path, multi_user: bool
             ) -> tuple[Store, socket.socket]:
    """Everything that can refuse to start, in order: the store, its lock, the directories, the
    port. Nothing runs yet."""
    store = open_store(data_dir, cfg.store.db)
    jobs = cfg.store.jobs_root()
    try:
        store.lock(f"pid={os.getpid()} host={socket.gethostname()}")
    except StoreLocked as exc:
        store.close()
        raise StartupError(f"another stint serve holds this store ({exc.holder}); one control "
                           "plane per store") from None
    claim_dirs(data_dir, jobs, store.store_id(), multi_user, store.max_job_id())
    if multi_user and (blocked := reachable(jobs)) is not None:
        log.warning("job directories under %s are out of reach of job accounts (%s is mode "
                    "%o): jobs of accounts other than %s will fail to start; pass --jobs-dir",
                    jobs, blocked, blocked.stat().st_mode & 0o777, getpass.getuser())
    return store, _listen(cfg.server.host, cfg.server.port)


def serve(cfg: ServeConfig) -> None:
    import uvicorn

    from stint.runtime.api import ApiSettings, create_app

    data_dir = check_config(cfg)
    name, options = cfg.policy_name(), cfg.policy_options()
    try:
        policy = make_with_options(name, options)  # fail before anything
    except (KeyError, ValueError) as exc:
        raise StartupError(str(exc).strip("'\"")) from None
    fleet = load_fleet(cfg)
    os.umask(0o077)  # everything the control plane writes is its own (jobs' dirs are chowned)
    multi_user = os.geteuid() == 0
    me = getpass.getuser()
    if multi_user:
        log.warning("multi-user mode: every job runs as its owner's OS account")
    else:
        log.warning("single-user mode (not running as root): every job runs as %s, with the "
                    "control plane's rights; run as root to isolate users", me)
    log_sandbox(job_network(cfg))
    store, sock = _prepare(cfg, data_dir, multi_user)
    token_file = data_dir / "admin.token"
    if store.ensure_admin_token(token_file, time.time(), os_user=me):
        log.warning("created the admin token in %s", token_file)
    metrics = Metrics(store)
    ctl = cfg.controller
    plane = (fleet_plane(cfg, data_dir, store, metrics, *fleet) if fleet is not None
             else single_plane(cfg, data_dir, store, policy, metrics))
    loop = ControlLoop(plane.body, ctl.tick_s, ctl.stuck_step_s)
    loop.start()
    app = create_app(store, ApiSettings(jobs_dir=cfg.store.jobs_root(), multi_user=multi_user,
                                        own_account=me, admin_token_file=token_file,
                                        limits=cfg.limits, policy=name, clusters=plane.storage))
    add_health_route(app, loop)
    add_metrics(app, metrics)
    log_listening(cfg, sock, token_file, name, None if fleet is None else fleet[0])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", http="httptools"))
    drain = [ctl.drain]

    def request_drain() -> list[str]:
        drain[0] = server.should_exit = True
        return sorted(job for executor in plane.executors for job in executor.running())

    add_drain_route(app, request_drain)
    # uvicorn answers SIGTERM by shutting down, then raises it again with the handler found at
    # start: this one, so that the shutdown below runs (and logs) instead of the default death.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        server.run(sockets=[sock])
    finally:
        shut_down(loop, plane.executors, drain[0], ctl.grace_s)
        plane.close()
        for executor in plane.executors:
            executor.close()
        store.close()


def job_network(cfg: ServeConfig) -> str:
    """The local executor's network: the configured one; "auto" is "private" when run as root
    where network namespaces can be made, else "host"."""
    from stint.runtime.executor import netns

    network = cfg.executor.network_for(os.geteuid() == 0)
    if cfg.executor.network == "auto" and network == "private" and netns.unavailable():
        return "host"
    return network


def log_sandbox(network: str) -> None:
    """What bounds jobs on this host (cgroups or only rlimits) and their network, at start-up."""
    from stint.runtime.executor import cgroup

    host = cgroup.detect()
    if host.kind == "none":
        log.warning("job bounds: no usable cgroups (%s): memory and processes are bounded by "
                    "rlimits, and only a worker's process group is swept when it ends",
                    host.reason)
    else:
        log.info("job bounds: %s", host.reason)
    if network == "private":
        log.info("job network (local executor): a private namespace per attempt (loopback only)")
    else:
        from stint.runtime.executor import netns

        log.warning("job network (local executor): the host's; a job's rendezvous is reachable "
                    "by every local account (%s)", netns.unavailable() or "executor.network")


def log_listening(cfg: ServeConfig, sock: socket.socket, token_file: Path, policy: str,
                  fleet: Fleet | None) -> None:
    """Where the control plane listens and how to connect to it (at WARNING: shown at every
    log level but ``error``)."""
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    ex = cfg.executor
    where = (f"{ex.nodes} local node(s) of {ex.gpus_per_node} GPU(s)" if ex.kind == "local"
             else f"ray at {ex.ray_address or '$RAY_ADDRESS'}")
    if fleet is not None:
        where = (f"each of {len(fleet.clusters)} clusters ({', '.join(c.name for c in fleet.clusters)}; "
                 f"{sum(c.nodes * c.gpus_per_node for c in fleet.clusters)} GPUs), global "
                 f"scheduler {cfg.fleet.global_policy}")
    log.warning("listening on %s: API under /v1, Prometheus metrics at /metrics; policy %s "
                "on %s", url, policy, where)
    log.warning("connect: stint jobs --server %s (or STINT_SERVER=%s); the admin's token is "
                "in %s (read by the CLI on this machine), other users get theirs from an "
                "admin (stint token create NAME) and pass it as STINT_TOKEN or --token",
                url, url, token_file)
