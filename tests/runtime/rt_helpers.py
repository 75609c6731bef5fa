"""Helpers shared by the control-plane tests (a module of its own: conftest is not importable)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from stint.runtime.client import Client

COUNTER = str(Path(__file__).with_name("counter_job.py"))
STINT = str(Path(sys.executable).with_name("stint"))


def counter_cmd(steps: int, out: Path, *extra: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    return [sys.executable, COUNTER, str(steps), str(out), *extra]


def wait_for(cond: Callable[[], object], timeout: float = 30.0, what: str = "condition",
             tick: Callable[[], object] | None = None, every: float = 0.05) -> object:
    """Poll ``cond`` every ``every`` seconds (calling ``tick`` between polls) until it is truthy;
    fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


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
