"""``stint serve``: the runtime edge. Owns the clock, the threads and the process; wires the store,
the executor, the policy, the controller loop and the HTTP server together."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.base import Executor
from stint.runtime.store import Store, sqlite_url

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger("stint.serve")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    data_dir: Path
    db: str | None = None  # default: SQLite in data_dir
    host: str = "127.0.0.1"
    port: int = 8765
    policy: str = "fifo"
    policy_options: tuple[str, ...] = ()  # --policy-opt KEY=VALUE, as in ``stint sim``
    executor: str = "local"
    nodes: int = 2
    gpus_per_node: int = 2
    tick_s: float = 0.5  # period of the reconcile loop
    grace_s: float = 30.0  # checkpoint request -> SIGTERM
    max_retries: int = 3
    ray_address: str | None = None  # --executor ray: the cluster (default: $RAY_ADDRESS)


def open_store(opts: ServeOptions) -> Store:
    opts.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(opts.db or sqlite_url(opts.data_dir))
    store.migrate()
    return store


def make_executor(opts: ServeOptions) -> Executor:
    state_dir = opts.data_dir / "executor"
    if opts.executor == "local":
        from stint.runtime.executor.local import LocalExecutor

        return LocalExecutor(state_dir, nodes=opts.nodes, gpus_per_node=opts.gpus_per_node)
    if opts.executor == "ray":
        from stint.runtime.executor import ray as ray_executor

        return ray_executor.RayExecutor(state_dir, address=opts.ray_address)
    raise ValueError(f"unknown executor {opts.executor!r}; valid: local, ray")


class ControlLoop(threading.Thread):
    """Steps the controller every ``tick_s`` seconds of wall-clock time until stopped.

    A step that raises (an executor or database error) is logged with its traceback and retried
    after a back-off that doubles per consecutive failure up to ``MAX_BACKOFF_S``. The store is the
    source of truth and every executor action is idempotent, so after a failed step the loop runs
    ``recover`` (as after a restart: re-adopt workers, apply missed exits, redo the intents the
    failed step committed but did not carry out) until it succeeds, then steps again.
    ``health()`` reports the loop's state (served at ``/v1/health/controller``)."""

    MAX_BACKOFF_S = 5.0

    def __init__(self, controller: Controller, tick_s: float) -> None:
        super().__init__(name="stint-controller", daemon=True)
        self.controller, self.tick_s = controller, tick_s
        self.stopping = threading.Event()
        self.steps = 0  # steps (and recoveries) that completed
        self.failures = 0  # failed attempts in total
        self.consecutive_failures = 0
        self.last_error: str | None = None
        self.last_ok_at: float | None = None
        self.recovered = False

    def health(self) -> dict[str, object]:
        """``ok`` once recovered and while the last step succeeded, ``failing`` after a failure,
        ``starting`` before recovery completed, ``stopped`` when the thread is gone."""
        if not self.is_alive():
            status = "stopped"
        elif self.consecutive_failures:
            status = "failing"
        else:
            status = "ok" if self.recovered else "starting"
        return {"status": status, "recovered": self.recovered, "steps": self.steps,
                "failures": self.failures, "consecutive_failures": self.consecutive_failures,
                "last_error": self.last_error, "last_ok_at": self.last_ok_at}

    def _attempt(self, what: str, action: Callable[[float], object]) -> bool:
        try:
            action(time.time())
        except Exception as exc:  # a bad step must not stop the control plane; the next one retries
            self.failures += 1
            self.consecutive_failures += 1
            self.last_error = f"{what}: {type(exc).__name__}: {exc}"
            log.exception("controller %s failed (%d in a row); retrying", what,
                          self.consecutive_failures)
            return False
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


def add_health_route(app: FastAPI, loop: ControlLoop) -> None:
    """``GET /v1/health/controller`` (no token, like ``/v1/health``): the loop's ``health()``;
    503 unless its status is ``ok``."""
    from fastapi.responses import JSONResponse

    def controller_health() -> JSONResponse:
        body = loop.health()
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    app.add_api_route("/v1/health/controller", controller_health, methods=["GET"])


def serve(opts: ServeOptions) -> None:
    import uvicorn

    from stint.policies.registry import make_with_options
    from stint.runtime.api import ApiSettings, create_app

    policy = make_with_options(opts.policy, opts.policy_options)  # fail before touching anything
    store = open_store(opts)
    if store.ensure_admin_token(opts.data_dir / "admin.token", time.time()):
        log.warning("created the admin token in %s", opts.data_dir / "admin.token")
    executor = make_executor(opts)
    controller = Controller(store, executor, policy, ControllerConfig(
        jobs_dir=opts.data_dir / "jobs", max_retries=opts.max_retries, grace_s=opts.grace_s))
    loop = ControlLoop(controller, opts.tick_s)
    loop.start()
    app = create_app(store, ApiSettings(jobs_dir=opts.data_dir / "jobs"))
    add_health_route(app, loop)
    try:
        uvicorn.run(app, host=opts.host, port=opts.port, log_level="warning")
    finally:
        # Workers keep running: a restarted control plane re-adopts them.
        loop.stopping.set()
        loop.join(timeout=10)
        executor.close()
        store.close()
