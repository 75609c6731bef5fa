"""A tiny local launcher: start P workers of a script with the STINT_* environment on 127.0.0.1.

It plays the executor's part of the contract for development and tests: it forwards SIGUSR1 and
SIGTERM to every worker, stops the others when one fails, and combines the exit codes::

    python -m stint.torch.launch --workers 2 --logical 4 --ckpt-dir /tmp/ck examples/mlp.py --steps 50

The rendezvous port is any free one, or one of ``--port PORT`` / ``--port FIRST-LAST`` (the
first free in the range from a random start; an error when the range is malformed or all of it
is in use).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import runpy
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from stint.ports import PortRange, PortRangeError, parse_ports, pick_port
from stint.torch.job import PREEMPTED_EXIT_CODE


def free_port(ports: PortRange | None = None) -> int:
    """A TCP port free on 127.0.0.1 right now: any, or one of ``ports`` (OSError if none is)."""
    if ports is not None:
        return pick_port(ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_env(
    rank: int,
    workers: int,
    logical: int,
    ckpt_dir: str | os.PathLike[str] | None,
    port: int,
    job_id: str = "local",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment the executor gives worker ``rank`` (see docs/torch-sdk.md)."""
    env = dict(os.environ if base is None else base)
    env.update(
        STINT_JOB_ID=job_id, STINT_RANK=str(rank), STINT_WORLD_SIZE=str(workers),
        STINT_LOGICAL_WORLD_SIZE=str(logical), STINT_MASTER_ADDR="127.0.0.1",
        STINT_MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(workers), LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    if ckpt_dir is not None:
        env["STINT_CKPT_DIR"] = os.fspath(ckpt_dir)
    return env


def start(
    cmd: Sequence[str],
    workers: int,
    logical: int,
    ckpt_dir: str | os.PathLike[str] | None,
    *,
    job_id: str = "local",
    extra_env: Sequence[Mapping[str, str]] | None = None,
    stdout: int | None = None,
    ports: PortRange | None = None,
) -> list[subprocess.Popen[bytes]]:
    """Start the workers; ``extra_env[r]`` is added to worker r's environment; the rendezvous
    port is one of ``ports`` (default: any free port)."""
    port = free_port(ports)
    procs = []
    for r in range(workers):
        env = worker_env(r, workers, logical, ckpt_dir, port, job_id)
        env.update(extra_env[r] if extra_env else {})
        procs.append(subprocess.Popen(list(cmd), env=env, stdout=stdout))
    return procs


_WARM_PRELOAD = ["numpy", "torch", "torch._dynamo", "torch.distributed", "stint.torch"]


class Worker(Protocol):
    """What :func:`wait` needs of a worker: a subset of ``subprocess.Popen``."""

    pid: int

    def poll(self) -> int | None: ...
    def send_signal(self, signum: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class Forked:
    """A worker forked from a warm fork server (torch imported once), with Popen's small interface."""

    def __init__(self, process: Any) -> None:
        self._process = process
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode  # type: ignore[no-any-return]

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()


def _run_script(script: str, argv: list[str], env: dict[str, str], stdout: str | None) -> None:
    """Body of a forked worker: become ``python script argv...`` with ``env``."""
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    if stdout is not None:
        sys.stdout = open(stdout, "w", buffering=1)  # noqa: SIM115 - flushed at exit by multiprocessing
    runpy.run_path(script, run_name="__main__")


def start_warm(
    script: str | os.PathLike[str],
    argv: Sequence[str],
    workers: int,
    logical: int,
    ckpt_dir: str | os.PathLike[str] | None,
    *,
    extra_env: Sequence[Mapping[str, str]] | None = None,
    stdout: Sequence[str | os.PathLike[str]] | None = None,
    ports: PortRange | None = None,
) -> list[Forked]:
    """Like :func:`start` for a Python script, but fork the workers from a fork server that has
    imported torch once: a worker starts in milliseconds instead of seconds (tests, benchmarks).
    ``stdout[r]`` is a file for worker r's standard output.
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_WARM_PRELOAD)
    port = free_port(ports)
    procs = []
    for r in range(workers):
        env = worker_env(r, workers, logical, ckpt_dir, port)
        env.update(extra_env[r] if extra_env else {})
        out = os.fspath(stdout[r]) if stdout else None
        p = ctx.Process(target=_run_script, args=(os.fspath(script), list(argv), env, out), daemon=False)
        p.start()
        procs.append(Forked(p))
    return procs


def stop_warm() -> None:
    """Stop the fork server that :func:`start_warm` started (it also exits with its parent)."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)  # private in CPython; absent elsewhere
    if stop is not None:
        stop()


def combined_code(codes: Sequence[int]) -> int:
    """0 if every worker finished; 75 if all stopped cleanly; otherwise the first failure's code."""
    failures = [c for c in codes if c not in (0, PREEMPTED_EXIT_CODE)]
    if failures:
        return failures[0] if failures[0] > 0 else 128 - failures[0]
    return PREEMPTED_EXIT_CODE if PREEMPTED_EXIT_CODE in codes else 0


def wait(procs: Sequence[Worker], grace: float = 10.0) -> int:
    """Wait for all workers; when one fails, the rest are terminated (then killed after ``grace``).

    Returns the first failure's code as seen in time (not the code of a worker the launcher then
    terminated itself), else :func:`combined_code` of all.
    """
    failed_at: float | None = None
    first: int | None = None
    while any(p.poll() is None for p in procs):
        codes = [c for c in (p.poll() for p in procs) if c is not None]
        failures = [c for c in codes if c not in (0, PREEMPTED_EXIT_CODE)]
        if failed_at is None and failures:
            failed_at, first = time.monotonic(), failures[0]
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        if failed_at is not None and time.monotonic() - failed_at > grace:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.02)
    if first is not None:
        return combined_code([first])
    return combined_code([p.poll() or 0 for p in procs])


def run(cmd: Sequence[str], workers: int, logical: int, ckpt_dir: str | None,
        ports: PortRange | None = None) -> int:
    """Start the workers, forward SIGUSR1/SIGTERM to them, and return the combined exit code."""
    procs = start(cmd, workers, logical, ckpt_dir, ports=ports)

    def forward(signum: int, frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    for s in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(s, forward)
    return wait(procs)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m stint.torch.launch", description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=1, help="physical workers P")
    p.add_argument("--logical", type=int, default=None, help="logical ranks L (default P)")
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("--port", default=None, metavar="PORT|FIRST-LAST",
                   help="the rendezvous port, or a range to pick a free one from (default: any free port)")
    p.add_argument("script", help="the training script (a .py file)")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = [sys.executable, str(Path(a.script)), *a.args]
    try:
        ports = parse_ports(a.port) if a.port is not None else None
        free_port(ports)  # a range with no free port fails here, before any worker starts
    except (PortRangeError, OSError) as e:
        p.error(f"--port: {e}")
    return run(cmd, a.workers, a.logical or a.workers, a.ckpt_dir, ports)


if __name__ == "__main__":
    sys.exit(main())
