"""``stint serve``: the runtime edge. Owns the clock, the threads and the process; wires the store,
the executor, the policy, the controller loop and the HTTP server together."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.base import Executor
from stint.runtime.store import Store, sqlite_url

log = logging.getLogger("stint.serve")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    data_dir: Path
    db: str | None = None  # default: SQLite in data_dir
    host: str = "127.0.0.1"
    port: int = 8765
    policy: str = "fifo"
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

        return ray_executor.RayExecutor(state_dir, address=opts.ray_address)  # type: ignore[no-any-return]
    raise ValueError(f"unknown executor {opts.executor!r}; valid: local, ray")


class ControlLoop(threading.Thread):
    """Steps the controller every ``tick_s`` seconds of wall-clock time until stopped."""

    def __init__(self, controller: Controller, tick_s: float) -> None:
        super().__init__(name="stint-controller", daemon=True)
        self.controller, self.tick_s = controller, tick_s
        self.stopping = threading.Event()

    def run(self) -> None:
        self.controller.recover(time.time())
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.controller.step(time.time())
            except Exception:  # a bad step must not stop the control plane; the next one retries
                log.exception("controller step failed")
            # Rest at least as long as the step took: the loop never takes over half of a core
            # (and of the GIL) from the API, however large the queue grows.
            self.stopping.wait(max(self.tick_s, time.monotonic() - started))


def serve(opts: ServeOptions) -> None:
    import uvicorn

    from stint.policies import make
    from stint.runtime.api import ApiSettings, create_app

    policy = make(opts.policy)  # fail before touching anything if the name is wrong
    store = open_store(opts)
    if store.ensure_admin_token(opts.data_dir / "admin.token", time.time()):
        log.warning("created the admin token in %s", opts.data_dir / "admin.token")
    executor = make_executor(opts)
    controller = Controller(store, executor, policy, ControllerConfig(
        jobs_dir=opts.data_dir / "jobs", max_retries=opts.max_retries, grace_s=opts.grace_s))
    loop = ControlLoop(controller, opts.tick_s)
    loop.start()
    app = create_app(store, ApiSettings(jobs_dir=opts.data_dir / "jobs"))
    try:
        uvicorn.run(app, host=opts.host, port=opts.port, log_level="warning")
    finally:
        # Workers keep running: a restarted control plane re-adopts them.
        loop.stopping.set()
        loop.join(timeout=10)
        executor.close()
        store.close()
