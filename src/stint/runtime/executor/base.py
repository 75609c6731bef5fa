"""The executor interface: start, signal, stop and observe the worker processes of jobs.

The controller (``stint.runtime``) decides *what* runs; an executor makes it so and reports what
happened. Two implementations share this contract: ``local`` (processes on this machine, virtual
nodes and accelerator slots) and ``ray`` (workers placed on a Ray cluster's nodes). The controller
does not know which one it drives.

Contract, in short
------------------
- A job runs as numbered **attempts**. Every (re)start of a job -- resume, resize, migrate, retry --
  is a new attempt with a larger number; an attempt is launched once, as one gang of workers.
- ``launch`` is idempotent per (job_id, attempt): launching an attempt that is already running or
  has already ended does nothing (it only starts ranks that were never started, which heals a
  controller killed in the middle of a launch). Launching a new attempt while an older attempt of
  the same job is still alive, or onto slots a live worker of another job holds, raises
  ``ExecutorError``: stop first, wait for ``poll`` to report the exit, then launch.
- ``request_stop`` asks every worker of the job to checkpoint and exit (SIGUSR1); if a worker is still
  alive after ``grace_s`` it gets SIGTERM, and SIGKILL a few seconds later. It returns immediately;
  the escalation is carried out by each worker's supervisor, so it survives the controller's death.
- ``poll`` returns every attempt that ended since the last call, each exactly once -- also across a
  controller restart: the "reported" mark is durable. An attempt ends when all its workers have
  exited; if one worker fails, the executor kills the rest of the gang.
- ``running`` is read from durable state, so a *new* executor object (after the controller was
  SIGKILLed and restarted) sees, signals and reports processes started by an old one.
- ``exit_of`` looks an ended attempt up again (reported or not), for recovery.

Environment of every worker process (the contract with ``stint.torch``)
-----------------------------------------------------------------------
``STINT_JOB_ID``, ``STINT_ATTEMPT``, ``STINT_RANK``, ``STINT_WORLD_SIZE``,
``STINT_LOGICAL_WORLD_SIZE``, ``STINT_CKPT_DIR``, ``STINT_MASTER_ADDR`` (127.0.0.1),
``STINT_MASTER_PORT`` (a free port chosen per attempt), ``STINT_STATUS_FILE`` (per job; the SDK may
write JSON progress there, read back by ``Executor.status``), ``STINT_STOP_FILE`` (appears when a stop
was requested: a second channel besides SIGUSR1), ``STINT_HEARTBEAT_FILE`` (a job without the
SDK may touch it to say it is alive; ``Executor.status`` reports its time as ``heartbeat_at``),
``STINT_NODE``; and the standard ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``CUDA_VISIBLE_DEVICES`` (the slots,
comma-joined). The environment is fresh: besides these it holds only ``PATH``, ``HOME``, ``USER``,
``LOGNAME``, ``SHELL``, ``LANG``/``LC_*``/``TZ``/``TERM`` and the ``CUDA_*``/``NCCL_*``/
``LD_LIBRARY_PATH`` settings of the executor's environment, never its credentials (store URL,
``PGPASSWORD``, stint or Ray tokens). ``WorkerLaunch.env`` is added last and wins.

Accounts: a ``WorkerLaunch.os_user`` runs the worker as that OS account (its uid, primary gid and
groups, ``HOME``/``USER``/``SHELL`` from the password database); the supervisor stays with the
executor's account (root) and the worker drops privileges before ``exec``. ``job_dir`` (owned by
that account, mode 0700, created or taken over by the executor) then holds the files the job
shares with the executor (``STINT_STATUS_FILE``, ``STINT_STOP_FILE``), and the log is opened
without following links and owned by the account. A launch that can never succeed (unknown
account, a job directory of another account, arguments beyond the OS limit) raises
``LaunchError``; a command that cannot be executed ends its attempt with exit code 127.

Exit codes: 0 = done, 75 (``EXIT_CHECKPOINTED``) = checkpointed on request, anything else = failed.
A script without the SDK ignores the stop protocol: SIGUSR1's default action kills it, and the job is
reported ``STOPPED`` (preempted without a checkpoint: it restarts from its last checkpoint, i.e.
from scratch if it never wrote one).

Changes to this interface are announced here.
- v1 (initial).
- v1.1: ``WorkerLaunch.cwd`` (optional working directory, default None = the executor's).
- v1.3: ``WorkerLaunch.os_user`` and ``job_dir``; ``LaunchError``; the worker's environment is
  fresh (see above) and ``cwd`` is entered as the worker's account (None = its home directory
  when ``os_user`` is set).
- v1.2: the executors are ``local.LocalExecutor(state_dir, nodes, gpus_per_node)`` and
  ``ray.RayExecutor(state_dir, address=None)`` (address defaults to ``$RAY_ADDRESS``).
- v1.4: ``WorkerLaunch.memory_max``, ``pids_max``, ``log_max_bytes``, ``disk_max_bytes``;
  ``LaunchError.transient``; ``STINT_HEARTBEAT_FILE`` and ``status()["heartbeat_at"]``.
- v1.3: ``down_nodes()``: the controller keeps nothing on a node that is down (the local
  executor's virtual nodes never are; the Ray executor does not report Ray node deaths yet).
- v1.5: ``NodeInfo.role``, ``cpus``, ``mem_gb``. A launch may hold a parameter-server job's
  servers besides its workers: tasks of ranks after the workers', without slots, whose
  ``env`` says their role (``STINT_ROLE=ps``, ``STINT_PS_RANK``) and the job's worker and PS
  counts (``STINT_WORLD_SIZE``, ``STINT_PS_COUNT``); the executor runs them as any rank of the
  gang (stopped, signalled and judged with it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

EXIT_CHECKPOINTED = 75  # EX_TEMPFAIL: "try again later" -- the SDK saved a checkpoint and exited
DEFAULT_GRACE_S = 30.0  # SIGUSR1 -> SIGTERM
TERM_GRACE_S = 3.0  # SIGTERM -> SIGKILL

SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ExecutorError(RuntimeError):
    """A request the executor refuses (bad launch, conflicting attempt or slots)."""


class LaunchError(ExecutorError):
    """A launch refused by the OS or the executor. ``transient``: it may succeed later (the
    host was short of processes, memory or descriptors: EAGAIN, ENOMEM, EMFILE, ENFILE), so the
    controller retries it with backoff; otherwise it can never succeed as given (an unknown
    account, a job directory of another account, arguments beyond the OS limit)."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True, slots=True)
class WorkerLaunch:
    """One worker of one attempt of a job: what to run, where, and as which rank. (A parameter
    server of the attempt is one too, of a rank after every worker's, with no slots; see v1.5.)"""

    job_id: str
    attempt: int  # bumps on every (re)start of the job
    rank: int  # physical rank, 0 .. world_size-1
    world_size: int  # physical workers in this attempt
    logical_world_size: int  # fixed for the job's life; a resize changes only world_size
    node: str  # a name from Executor.nodes()
    slots: tuple[int, ...]  # accelerator slots on that node, e.g. (0, 1)
    command: tuple[str, ...]  # argv; a list is accepted and stored as a tuple
    ckpt_dir: str
    log_path: str  # stdout+stderr of the worker (appended; several ranks may share one file)
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None  # working directory of the command; None = the executor's
    os_user: str | None = None  # OS account the worker runs as; None = the executor's own
    job_dir: str | None = None  # the job's own directory (status and stop files); None = state
    # What the kernel bounds, per worker (None: no bound): its memory in bytes (a cgroup's
    # memory limit), its processes and threads (the cgroup's pids limit); and per job: the bytes
    # its log may hold (past them the oldest part is dropped) and the bytes its directory may
    # hold (past them the attempt fails).
    memory_max: int | None = None
    pids_max: int | None = None
    log_max_bytes: int | None = None
    disk_max_bytes: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "slots", tuple(self.slots))
        object.__setattr__(self, "env", dict(self.env))
        where = f"worker launch (job {self.job_id!r}, attempt {self.attempt}, rank {self.rank})"
        if not isinstance(self.job_id, str) or not SAFE_ID.match(self.job_id):
            raise ExecutorError(f"{where}: job_id must match {SAFE_ID.pattern}")
        if self.attempt < 0:
            raise ExecutorError(f"{where}: attempt must be >= 0")
        if not 0 <= self.rank < self.world_size:
            raise ExecutorError(f"{where}: rank must be in 0..world_size-1 ({self.world_size})")
        if self.logical_world_size < 1:
            raise ExecutorError(f"{where}: logical_world_size must be >= 1")
        if not self.command or not all(isinstance(a, str) for a in self.command):
            raise ExecutorError(f"{where}: command must be a non-empty list of strings")
        if any(s < 0 for s in self.slots) or len(set(self.slots)) != len(self.slots):
            raise ExecutorError(f"{where}: slots must be distinct non-negative ints")


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"  # every worker exited 0
    CHECKPOINTED = "checkpointed"  # every worker exited 75 (or 0): resume from the checkpoint
    STOPPED = "stopped"  # stop/kill requested, ended without a checkpoint: not the job's fault
    FAILED = "failed"  # a worker exited with another code or died, unasked


@dataclass(frozen=True, slots=True)
class JobExit:
    """How one attempt of a job ended. ``exit_codes[rank]`` is negative -N if killed by signal N."""

    job_id: str
    attempt: int
    outcome: Outcome
    exit_codes: Mapping[int, int]
    reason: str
    ended_at: float  # wall-clock time of the last worker's exit


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node tasks can be placed on: its accelerator slots and type, what it hosts (``role``:
    "any", "worker" or "ps", as ``model.Node``), and its CPU cores and memory (GiB; 0: as
    ``node_resources`` defaults them), which parameter servers are placed by."""

    name: str
    slots: int
    gpu_type: str = ""  # its accelerators' type ("": untyped)
    role: str = "any"
    cpus: float = 0.0
    mem_gb: float = 0.0


# A node that states no CPU cores or memory has these per accelerator slot (the simulator's
# uniform clusters'), and every node this much network bandwidth (Gbit/s): a parameter-server
# job's tasks are placed by them (``runtime.view.spec_of``).
CPUS_PER_SLOT, MEM_GB_PER_SLOT, NODE_NET_GBPS = 8.0, 64.0, 100.0


def node_resources(n: NodeInfo) -> tuple[float, float]:
    """The node's CPU cores and memory (GiB): its own, else ``CPUS_PER_SLOT``/``MEM_GB_PER_SLOT``
    per slot."""
    return (n.cpus or CPUS_PER_SLOT * n.slots, n.mem_gb or MEM_GB_PER_SLOT * n.slots)


class Executor(Protocol):
    """What the controller drives. All methods are cheap and non-blocking (no waiting on jobs)."""

    def nodes(self) -> list[NodeInfo]:
        """The nodes workers can be placed on, with their accelerator slot counts."""
        ...

    def launch(self, workers: Sequence[WorkerLaunch]) -> None:
        """Start one attempt: all its workers (same job_id and attempt, ranks 0..world_size-1)."""
        ...

    def request_stop(self, job_id: str, grace_s: float = DEFAULT_GRACE_S) -> None:
        """Ask the live attempt of the job to checkpoint and exit; escalate after ``grace_s``.

        A no-op if nothing of the job is alive. Calling it again does not restart the grace period.
        """
        ...

    def kill(self, job_id: str) -> None:
        """SIGKILL every worker of the job's live attempt now (reported as STOPPED by poll)."""
        ...

    def poll(self) -> list[JobExit]:
        """Attempts that ended since the last poll (by any executor object), each reported once."""
        ...

    def running(self) -> dict[str, int]:
        """job_id -> attempt, for every attempt with at least one worker alive now."""
        ...

    def exit_of(self, job_id: str, attempt: int) -> JobExit | None:
        """How that attempt ended, or None if it is still running or was never launched."""
        ...

    def status(self, job_id: str) -> Mapping[str, Any] | None:
        """The job's last progress report (the JSON its SDK wrote to STINT_STATUS_FILE), if any."""
        ...

    def down_nodes(self) -> frozenset[str]:
        """Names of nodes that are down now (cheap: the controller asks at every step). The
        attempts that ran on a node that went down are reported ended by ``poll``."""
        ...

    def close(self) -> None:
        """Release this object's resources. Workers keep running (a new executor re-adopts them)."""
        ...
