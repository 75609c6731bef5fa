"""A tiny local launcher: start P workers of a script with the STINT_* environment on 127.0.0.1.

It plays the executor's part of the contract for development and tests: it forwards SIGUSR1 and
SIGTERM to every worker, stops the others when one fails, and combines the exit codes::

    python -m stint.torch.launch --workers 2 --logical 4 --ckpt-dir /tmp/ck examples/mlp.py --steps 50
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from stint.torch.job import PREEMPTED_EXIT_CODE


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
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
) -> list[subprocess.Popen[bytes]]:
    """Start the workers; ``extra_env[r]`` is added to worker r's environment."""
    port = free_port()
    procs = []
    for r in range(workers):
        env = worker_env(r, workers, logical, ckpt_dir, port, job_id)
        env.update(extra_env[r] if extra_env else {})
        procs.append(subprocess.Popen(list(cmd), env=env, stdout=stdout))
    return procs


def combined_code(codes: Sequence[int]) -> int:
    """0 if every worker finished; 75 if all stopped cleanly; otherwise the first failure's code."""
    failures = [c for c in codes if c not in (0, PREEMPTED_EXIT_CODE)]
    if failures:
        return failures[0] if failures[0] > 0 else 128 - failures[0]
    return PREEMPTED_EXIT_CODE if PREEMPTED_EXIT_CODE in codes else 0


def wait(procs: Sequence[subprocess.Popen[bytes]], grace: float = 10.0) -> int:
    """Wait for all workers; when one fails, the rest are terminated (then killed after ``grace``)."""
    failed_at: float | None = None
    while any(p.poll() is None for p in procs):
        codes = [p.returncode for p in procs if p.returncode is not None]
        if failed_at is None and any(c not in (0, PREEMPTED_EXIT_CODE) for c in codes):
            failed_at = time.monotonic()
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        if failed_at is not None and time.monotonic() - failed_at > grace:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.02)
    return combined_code([p.returncode for p in procs])


def run(cmd: Sequence[str], workers: int, logical: int, ckpt_dir: str | None) -> int:
    """Start the workers, forward SIGUSR1/SIGTERM to them, and return the combined exit code."""
    procs = start(cmd, workers, logical, ckpt_dir)

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
    p.add_argument("script", help="the training script (a .py file)")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    cmd = [sys.executable, str(Path(a.script)), *a.args]
    return run(cmd, a.workers, a.logical or a.workers, a.ckpt_dir)


if __name__ == "__main__":
    sys.exit(main())
