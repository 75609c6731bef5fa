"""Helpers shared by the control-plane tests (a module of its own: conftest is not importable)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
from builders import wait_for  # type: ignore[import-not-found]

from stint.policies import make
from stint.runtime.client import Client
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.base import Executor, ExecutorError
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.tables import Job

COUNTER = str(Path(__file__).with_name("counter_job.py"))
STINT = str(Path(sys.executable).with_name("stint"))


def counter_cmd(steps: int, out: Path, *extra: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    return [sys.executable, COUNTER, str(steps), str(out), *extra]


@dataclass
class Harness:
    """A controller stepped by hand over a real LocalExecutor (2 nodes x 2 slots, FIFO)."""

    store: Store
    root: Path
    ctl: Controller
    caller: Caller

    def submit(self, cmd: list[str], gpus: int = 1, lo: int | None = None,
               hi: int | None = None, **bounds: Any) -> int:
        """A job of ``gpus`` workers; ``bounds``: ``NewJob``'s (``time_limit_s``, ...)."""
        spec = NewJob("t", cmd, gpus, lo or gpus, hi or gpus, "standard", 1.0, None, **bounds)
        return self.store.add_job(spec, self.caller, time.time()).id

    def job(self, job_id: int) -> Job:
        job = self.store.get_job(job_id)
        assert job is not None
        return job

    def run_until(self, job_id: int, cond: Callable[[Job], object], what: str,
                  timeout: float = 30.0) -> Job:
        wait_for(lambda: cond(self.job(job_id)), timeout, f"job {job_id}: {what}",
                 tick=lambda: self.ctl.step(time.time()))
        return self.job(job_id)

    def path(self, job_id: int) -> list[str]:
        return [t.dst for t in self.store.transitions(job_id)]

    def restart(self) -> Controller:
        """A new executor and controller on the same state, as after a SIGKILL."""
        self.ctl = make_controller(self.store, self.root, config=self.ctl.config)
        return self.ctl

    def configure(self, executor: Executor | None = None, **config: Any) -> Controller:
        """A new controller with these ``ControllerConfig`` fields changed (and ``executor``
        instead of the real one, e.g. a ``FlakyExecutor`` around it)."""
        self.ctl = make_controller(self.store, self.root, executor,
                                   replace(self.ctl.config, **config))
        return self.ctl


def make_controller(store: Store, root: Path, executor: Executor | None = None,
                    config: ControllerConfig | None = None, max_retries: int = 3) -> Controller:
    executor = executor or LocalExecutor(root / "executor", nodes=2, gpus_per_node=2)
    config = config or ControllerConfig(jobs_dir=root / "jobs", max_retries=max_retries,
                                        grace_s=10.0)
    return Controller(store, executor, make("fifo"), config)


class FlakyExecutor:
    """Delegates to a real executor; the first ``fail[name]`` calls of method ``name`` raise
    ``error(message)``, and a call of a method named in ``gates`` waits for its event first."""

    def __init__(self, inner: LocalExecutor, fail: dict[str, int],
                 error: Callable[[str], Exception] = ExecutorError) -> None:
        self.inner, self.fail, self.error = inner, dict(fail), error
        self.calls: dict[str, int] = {}
        self.gates: dict[str, threading.Event] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            gate = self.gates.get(name)
            if gate is not None:
                gate.wait()
            if self.fail.get(name, 0) > 0:
                self.fail[name] -= 1
                raise self.error(f"injected failure in {name}")
            return real(*args, **kwargs)

        return call


class ServeProc:
    """A real ``stint serve`` process on 127.0.0.1 (started, SIGKILLed and restarted by pid)."""

    def __init__(self, data_dir: Path, db_url: str, *extra: str) -> None:
        self.data_dir, self.db_url, self.extra = data_dir, db_url, extra
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] | None = None  # the server's environment (default: inherited)
        self.jobs_dir = data_dir.with_name(data_dir.name + "-jobs")  # serve's default

    def start(self) -> None:
        cmd = [STINT, "serve", "--data-dir", str(self.data_dir), "--db", self.db_url,
               "--port", str(self.port), "--nodes", "2", "--gpus-per-node", "2",
               "--tick", "0.1", "--grace", "10", *self.extra]
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = (self.data_dir.parent / "serve.log").open("ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        wait_for(self._healthy, 60, "stint serve to answer")

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = (self.data_dir.parent / "serve.log").read_text()[-3000:]
            raise AssertionError(f"stint serve exited with {self.proc.returncode}:\n{tail}")
        try:
            return httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def client(self) -> Client:
        return Client(self.url, (self.data_dir / "admin.token").read_text().strip())

    def cli(self, *args: str, token: str | None = None) -> str:
        """Run the real ``stint`` CLI against this server; return stdout (fail on error).
        Without ``token`` the CLI finds the admin token in the data directory."""
        env = {**os.environ, "STINT_SERVER": self.url, "STINT_DATA_DIR": str(self.data_dir)}
        env.pop("STINT_TOKEN", None)
        if token:
            env["STINT_TOKEN"] = token
        r = subprocess.run([STINT, *args], capture_output=True, text=True, timeout=60, env=env,
                           check=False)
        assert r.returncode == 0, f"stint {' '.join(args)} failed: {r.stderr}"
        return r.stdout


def public_python() -> str | None:
    """A Python every account can run (the venv's may live under root's 0700 home), for jobs and
    helpers that use the standard library only."""
    for cand in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        real = Path(os.path.realpath(cand))
        if real.exists() and all(p.stat().st_mode & 0o001 for p in [real, *real.parents]):
            return str(real)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture


def peer_nodelay(pid: int, conn: socket.socket) -> bool:
    """Whether the socket that process ``pid`` holds at the other end of the TCP connection
    ``conn`` has ``TCP_NODELAY``: read from a copy of its descriptor (``pidfd_getfd``, Linux
    5.6+; needs the right to ptrace ``pid``: root, or a child of ours). Fails if ``pid`` holds
    no such socket."""
    libc = ctypes.CDLL(None, use_errno=True)
    ours = conn.getsockname()
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except FileNotFoundError:  # closed meanwhile
                continue
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"pidfd_getfd of fd {name} of pid {pid}: {os.strerror(err)}")
            with socket.socket(fileno=fd) as theirs:
                if theirs.type != socket.SOCK_STREAM or theirs.family not in (socket.AF_INET,
                                                                              socket.AF_INET6):
                    continue
                try:
                    peer = theirs.getpeername()
                except OSError:  # a listener
                    continue
                if peer[:2] == ours[:2]:
                    return bool(theirs.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    finally:
        os.close(pidfd)
    raise AssertionError(f"pid {pid} holds no socket connected to {ours}")


def kill_leftover_workers(data_dir: Path) -> None:
    """Stop the workers a test's control plane left behind (by their executor's records)."""
    from stint.runtime.executor.local import LocalExecutor

    ex = LocalExecutor(data_dir / "executor", nodes=2, gpus_per_node=2)
    for jid in ex.running():
        ex.kill(jid)
    wait_for(lambda: not ex.running(), 10, "leftover workers to exit")
    ex.close()


MLP = str(Path(__file__).resolve().parents[2] / "examples" / "mlp.py")


def final_digest(text: str, steps: int) -> str:
    """The model digest ``examples/mlp.py`` prints once, on finishing ``steps`` steps."""
    found = re.findall(rf"done step {steps} digest (\S+)", text)
    assert len(found) == 1, text[-2000:]
    return str(found[0])


TWO_CLUSTERS = """\
[region.east.cluster.a]
nodes = 1
gpus_per_node = 1
[region.west.cluster.b]
nodes = 1
gpus_per_node = 1
"""  # a fleet file: clusters a and b, one 1-GPU node each, in two regions
