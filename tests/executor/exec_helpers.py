"""Builders and waits shared by the executor tests (real processes; no mocks)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from builders import wait_for  # type: ignore[import-not-found]

from stint.runtime.executor import JobExit, WorkerLaunch
from stint.runtime.executor.supervised import SupervisedExecutor

MakeExecutor = Callable[[], SupervisedExecutor]

PY = sys.executable

# Worker scripts. Each one that needs to be signalled writes "<rank>.ready" into its checkpoint
# directory once its handlers are installed, so a test never races the worker's startup.
READY = (
    "import os, pathlib\n"
    "def ready():\n"
    "    d = pathlib.Path(os.environ['STINT_CKPT_DIR'])\n"
    "    d.mkdir(parents=True, exist_ok=True)\n"
    "    (d / (os.environ['RANK'] + '.ready')).touch()\n"
)

TRAP_USR1 = READY + (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, lambda *a: sys.exit(75))\n"
    "ready()\n"
    "while True: time.sleep(0.05)\n"
)
NO_SDK_SLEEP = READY + "import time\nready()\ntime.sleep(600)\n"
IGNORE_ALL = READY + (
    "import signal, time\n"
    "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "ready()\n"
    "while True: time.sleep(0.05)\n"
)


def gang(
    tmp: Path,
    job: str,
    code: str,
    n: int = 1,
    attempt: int = 0,
    nodes: Sequence[str] = ("node-0",),
    slot0: int = 0,
    logical: int | None = None,
) -> list[WorkerLaunch]:
    """``n`` workers running ``python -c code``, round-robin over ``nodes``, one slot each."""
    return [
        WorkerLaunch(
            job_id=job,
            attempt=attempt,
            rank=r,
            world_size=n,
            logical_world_size=logical or n,
            node=nodes[r % len(nodes)],
            slots=(slot0 + r // len(nodes),),
            command=[PY, "-c", code],
            ckpt_dir=str(tmp / "ckpt" / job),
            log_path=str(tmp / "logs" / f"{job}.log"),
        )
        for r in range(n)
    ]


def wait_ready(tmp: Path, job: str, n: int = 1) -> None:
    d = tmp / "ckpt" / job
    wait_for(lambda: all((d / f"{r}.ready").exists() for r in range(n)), what=f"{job} ready")


def worker_of(attempt_dir: Path, rank: int) -> dict[str, int]:
    """Rank ``rank``'s worker (pid, start ticks) as its supervisor records it. The worker can be
    ready before the supervisor has written the record (it does so once ``Popen`` returns)."""
    path = attempt_dir / f"rank-{rank}.child"
    wait_for(path.exists, what=f"{path.name} to be written")
    record: dict[str, int] = json.loads(path.read_text())
    return record


_UNCLAIMED: dict[int, list[JobExit]] = {}  # exits polled while waiting for another job


def wait_exit(ex: SupervisedExecutor, job: str, timeout: float = 30.0) -> JobExit:
    """Poll until ``job`` is reported; fail if any exit is reported twice meanwhile.

    Exits of other jobs seen on the way are kept for a later ``wait_exit`` on the same executor.
    """
    pending = _UNCLAIMED.setdefault(id(ex), [])

    def step() -> bool:
        pending.extend(ex.poll())
        keys = [(e.job_id, e.attempt) for e in pending]
        assert len(keys) == len(set(keys)), f"an exit was reported twice: {keys}"
        return any(e.job_id == job for e in pending)

    wait_for(step, timeout, what=f"exit of {job}")
    found = [e for e in pending if e.job_id == job]
    assert len(found) == 1
    pending.remove(found[0])
    return found[0]


def launch_then_stop(
    ex: SupervisedExecutor, tmp: Path, job: str, code: str, grace_s: float, n: int = 1
) -> JobExit:
    """Launch ``n`` workers of ``code`` (one per node), wait until they are ready, stop, wait."""
    ex.launch(gang(tmp, job, code, n=n, nodes=("node-0", "node-1")))
    wait_ready(tmp, job, n)
    assert ex.running() == {job: 0}
    ex.request_stop(job, grace_s=grace_s)
    return wait_exit(ex, job)
