"""Pydantic models of the HTTP API (the edge: plain rows and dataclasses inside)."""

from __future__ import annotations

import json
import time
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from stint.config import MAX_COMMAND_BYTES, MAX_SIZE, MIN_MEMORY
from stint.model.job import Tier
from stint.model.sla import attainment
from stint.runtime.states import TERMINAL
from stint.runtime.store import load_alloc
from stint.runtime.tables import Decision, Job, Transition
from stint.runtime.view import worker_counts

MAX_ID = 2_147_483_647  # jobs.id is a 32-bit integer in PostgreSQL
MAX_ENV_BYTES = 64 * 1024
Text = Annotated[str, Field(max_length=4096)]
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
# Variables of the worker contract (see executor.base) a submission may not set.
RESERVED_ENV = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                          "CUDA_VISIBLE_DEVICES", "HOME", "USER", "LOGNAME"})
OS_USER = r"^[a-z_][a-z0-9_.-]{0,31}$"
USER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def _no_nul(value: str, field: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{field} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{field} must be valid Unicode (no lone surrogates)") from None
    return value


def _size(strings: list[str]) -> int:
    """Bytes the strings take in an argv or environment block (each NUL-terminated)."""
    return sum(len(x.encode("utf-8")) + 1 for x in strings)


GPU_TYPE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # an accelerator type's name (cluster files' too)


class JobIn(BaseModel):
    """A job submission: ``gpus`` workers of one GPU each (default: ``max_gpus``, else 1);
    ``min_gpus``..``max_gpus`` bound elastic resizing (both default to ``gpus``); ``deadline_s``
    is seconds after submission."""

    model_config = ConfigDict(extra="forbid")

    command: list[Text] = Field(min_length=1, max_length=1024)
    name: str = Field(default="", max_length=128)
    gpus: int | None = Field(default=None, ge=1, le=MAX_ID)
    min_gpus: int | None = Field(default=None, ge=1, le=MAX_ID)
    max_gpus: int | None = Field(default=None, ge=1, le=MAX_ID)
    tier: Tier = Tier.STANDARD
    priority: float = Field(default=1.0, ge=0.0, le=1e12, allow_inf_nan=False)
    deadline_s: float | None = Field(default=None, gt=0.0, le=1e12, allow_inf_nan=False)
    # Declared lengths (optional): run time in seconds at ``gpus`` workers, and training steps
    # (the SDK reports its step); length-aware policies (SRTF, OASiS) read them.
    est_s: float | None = Field(default=None, gt=0.0, le=1e9, allow_inf_nan=False)
    total_steps: int | None = Field(default=None, ge=1, le=MAX_ID)
    # The SDK's logical ranks (default ``max_gpus``): the job runs on their divisors only.
    logical_ranks: int | None = Field(default=None, ge=1, le=4096)
    # Parameter servers of a stint.torch.ps job at ``gpus`` workers, the counts it may run with
    # (both default to ``ps``), and one PS's CPU cores and memory (GiB; default 1 and 1). A
    # plan that places them (OASiS, on a cluster with nodes of role "ps") has them launched
    # there; otherwise its worker 0 starts ``ps`` of them (STINT_PS_COUNT).
    ps: int | None = Field(default=None, ge=1, le=256)
    min_ps: int | None = Field(default=None, ge=1, le=256)
    max_ps: int | None = Field(default=None, ge=1, le=256)
    ps_cpus: float | None = Field(default=None, gt=0.0, le=1e6, allow_inf_nan=False)
    ps_mem_gb: float | None = Field(default=None, gt=0.0, le=1e9, allow_inf_nan=False)
    cwd: str | None = Field(default=None, min_length=1, max_length=4096)
    env: dict[Annotated[str, Field(pattern=ENV_NAME)], Text] = Field(default_factory=dict,
                                                                     max_length=256)
    # Bounds (None: the operator's defaults; past the operator's maximum: a 422 naming the
    # field): a worker's memory in bytes and its processes and threads, seconds the job may
    # hold GPUs over all its attempts, seconds its step may stall before it is restarted as
    # hung (0: never), and the worker failures it survives.
    memory_max: int | None = Field(default=None, ge=MIN_MEMORY, le=MAX_SIZE)
    pids_max: int | None = Field(default=None, ge=1, le=4_194_304)
    time_limit_s: float | None = Field(default=None, gt=0.0, le=1e9, allow_inf_nan=False)
    hang_s: float | None = Field(default=None, ge=0.0, le=1e9, allow_inf_nan=False)
    max_retries: int | None = Field(default=None, ge=0, le=1000)
    # The accelerator types it may run on (``stint submit --gpu-type a100,v100``; empty: any).
    gpu_types: list[Annotated[str, Field(pattern=GPU_TYPE)]] = Field(default_factory=list, max_length=16)

    @field_validator("command")
    @classmethod
    def _command(cls, argv: list[str]) -> list[str]:
        if not argv[0].strip():
            raise ValueError("command[0] (the program) must not be empty")
        for arg in argv:
            _no_nul(arg, "command")
        if _size(argv) > MAX_COMMAND_BYTES:
            raise ValueError(f"command takes {_size(argv)} bytes; the most a job may have is "
                             f"{MAX_COMMAND_BYTES} (the OS limits a program's arguments)")
        return argv

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, cwd: str | None) -> str | None:
        if cwd is not None and not _no_nul(cwd, "cwd").startswith("/"):
            raise ValueError("cwd must be an absolute path")
        return cwd

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for key, value in env.items():
            if key.startswith("STINT_") or key in RESERVED_ENV:
                raise ValueError(f"env: {key} is set by stint (see docs/executors.md)")
            _no_nul(value, f"env[{key}]")
        size = _size([f"{k}={v}" for k, v in env.items()])
        if size > MAX_ENV_BYTES:
            raise ValueError(f"env takes {size} bytes; the most a job may have is {MAX_ENV_BYTES}")
        return env

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return _no_nul(name, "name")

    def bounds(self) -> tuple[int, int, int]:
        """(gpus, min_gpus, max_gpus) with the defaults filled in; not checked (see api)."""
        gpus = self.gpus if self.gpus is not None else (self.max_gpus or self.min_gpus or 1)
        lo = self.min_gpus if self.min_gpus is not None else min(gpus, self.max_gpus or gpus)
        hi = self.max_gpus if self.max_gpus is not None else max(gpus, lo)
        return gpus, lo, hi


MAX_ARRAY_TASKS = 100_000


class ArrayIn(JobIn):
    """A job array: one task of the job's spec per index of ``array`` (``A-B``, both included),
    ``{i}`` in the command replaced by the index, ``STINT_ARRAY_INDEX`` in its environment; at
    most ``array_parallel`` of its tasks hold GPUs at once (None: no limit)."""

    array: str = Field(pattern=r"^[0-9]{1,9}-[0-9]{1,9}$")
    array_parallel: int | None = Field(default=None, ge=1, le=MAX_ARRAY_TASKS)

    @field_validator("array")
    @classmethod
    def _array(cls, text: str) -> str:
        lo, hi = (int(x) for x in text.split("-"))
        if lo > hi:
            raise ValueError(f"array {text}: the first index must not be past the last")
        if hi - lo + 1 > MAX_ARRAY_TASKS:
            raise ValueError(f"array {text} has {hi - lo + 1} tasks; the most an array may have "
                             f"is {MAX_ARRAY_TASKS}")
        return text

    def indices(self) -> range:
        lo, hi = (int(x) for x in self.array.split("-"))
        return range(lo, hi + 1)


class ArrayOut(BaseModel):
    array_id: int  # the id of its first task; ``GET /v1/arrays/{array_id}`` lists them all
    tasks: int
    job_ids: list[int]  # in index order
    first_index: int


class ArrayCancelOut(BaseModel):
    array_id: int
    cancelling: list[int]  # the unfinished tasks asked to stop


class ResizeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workers: int = Field(ge=1, le=MAX_ID)


class MigrateIn(BaseModel):
    """A node of the job's cluster (``node``), or another cluster of the fleet (``to_cluster``):
    exactly one."""

    model_config = ConfigDict(extra="forbid")
    node: str | None = Field(default=None, min_length=1, max_length=128)
    to_cluster: str | None = Field(default=None, min_length=1, max_length=64)

    @field_validator("node", "to_cluster")
    @classmethod
    def _text(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else _no_nul(value, str(info.field_name))

    @model_validator(mode="after")
    def _one(self) -> MigrateIn:
        if (self.node is None) == (self.to_cluster is None):
            raise ValueError("give exactly one of node and to_cluster")
        return self


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = Field(min_length=1, max_length=64, pattern=USER_NAME)
    admin: bool | None = None  # True/False sets the role; None keeps it (a new user: no admin)
    os_user: str | None = Field(default=None, pattern=OS_USER)  # the OS account of its jobs


class TokenOut(BaseModel):
    user: str
    admin: bool
    token: str
    os_user: str | None = None


class UserOut(BaseModel):
    user: str
    admin: bool
    os_user: str | None
    created_at: float
    token_created_at: float | None  # None: no valid token (revoked)


class WhoAmI(BaseModel):
    user: str
    admin: bool
    # The OS account the caller's jobs run as (multi-user mode: None when they may not submit)
    os_user: str | None


class ProgressOut(BaseModel):
    """The SDK's last progress report of a job (its ``status.json``); None where not reported."""

    step: int | None
    total_steps: int | None
    checkpoint_step: int | None  # the step of its last checkpoint
    reported_at: float | None  # when it was written (wall seconds)


class JobOut(BaseModel):
    id: int
    name: str
    user: str
    command: list[str]
    gpus: int
    min_gpus: int
    max_gpus: int
    tier: str
    priority: float
    deadline_s: float | None
    state: str
    reason: str
    attempt: int
    allocation: dict[str, int]  # node name -> workers (the last allocation once stopped)
    submitted_at: float
    first_start_at: float | None
    finished_at: float | None
    failures: int
    preemptions: int
    exit_code: int | None
    attained_gpu_s: float
    pin_workers: int | None
    pin_node: str | None
    cancel_requested: bool
    est_s: float | None
    total_steps: int | None
    worker_counts: list[int]  # the worker counts the job can run on
    ps: int | None  # parameter servers of a stint.torch.ps job (None: not one)
    # Its PS counts' bounds, one PS's cores and memory (GiB) as submitted (None: not given),
    # and where its PSs are (node name -> PSs; empty when the plan placed none)
    min_ps: int | None = None
    max_ps: int | None = None
    ps_cpus: float | None = None
    ps_mem_gb: float | None = None
    ps_allocation: dict[str, int] = Field(default_factory=dict)
    target: dict[str, int]  # node name -> workers it is admitted to (re)launch on, if waiting
    decision: str | None  # what the policy decided for the job and why (``Plan.explain``)
    # Forecast (re)start of a waiting job and finish of an unfinished one, wall seconds
    # (``FORECAST_BASIS``); None once it runs (start) or ends (both), or with no forecast.
    est_start_at: float | None
    est_finish_at: float | None
    # The estimated start's band (``sim.forecast.band``), wall seconds; None as est_start_at.
    # An estimated start earlier than now is overdue: the controller estimates it again.
    est_start_lo_at: float | None = None
    est_start_hi_at: float | None = None
    # A waiting (queued or preempted) job's place in its policy's queue: 1 starts next. The
    # order the forecast's replay of the policy starts the waiting jobs in (ties: arrival);
    # None while it runs or holds an admission, or when there is no forecast.
    queue_position: int | None
    os_user: str | None  # the OS account it runs as (None: the control plane's)
    cwd: str | None
    env: dict[str, str]
    # SLA attainment (``stint.model.sla``), so far for a job that has not finished; None if it
    # was rejected or cancelled before running
    attainment: float | None = None
    progress: ProgressOut | None = None  # None: no report (not an SDK job, or it has not run)
    # In a fleet: the cluster it is on (None: not placed yet, or a single cluster), the one it
    # is moving to, and its checkpoint's last copy between clusters (bytes, seconds)
    cluster: str | None = None
    to_cluster: str | None = None
    copy_bytes: int | None = None
    copy_s: float | None = None
    # The bounds it asked for (None: the operator's defaults), the seconds it has held GPUs
    # over its ended attempts (its time limit's clock), and when a failed job is retried
    memory_max: int | None = None
    pids_max: int | None = None
    time_limit_s: float | None = None
    hang_s: float | None = None
    max_retries: int | None = None
    run_s: float = 0.0
    retry_at: float | None = None
    # A task of a job array: the array's id (its first task's job id) and the task's index
    array_id: int | None = None
    array_index: int | None = None
    gpu_types: list[str] = Field(default_factory=list)  # the types it may run on (empty: any)

    @staticmethod
    def of(job: Job, user: str, node_names: list[str], now: float | None = None,
           progress: ProgressOut | None = None) -> JobOut:
        alloc = load_alloc(job.allocation)
        return JobOut(
            id=job.id, name=job.name, user=user, command=json.loads(job.command), gpus=job.gpus,
            min_gpus=job.min_gpus, max_gpus=job.max_gpus, tier=job.tier, priority=job.priority,
            deadline_s=job.deadline_s, state=job.state, reason=job.reason, attempt=job.attempt,
            allocation={node_name(node_names, n): c for n, c in alloc.workers},
            submitted_at=job.submitted_at, first_start_at=job.first_start_at,
            finished_at=job.finished_at, failures=job.failures, preemptions=job.preemptions,
            exit_code=job.exit_code, attained_gpu_s=job.attained_gpu_s,
            pin_workers=job.pin_workers, pin_node=job.pin_node,
            cancel_requested=job.cancel_requested, est_s=job.est_s, total_steps=job.total_steps,
            worker_counts=list(worker_counts(job.gpus, job.min_gpus, job.max_gpus,
                                             job.logical_ranks)),
            ps=job.ps_count, min_ps=job.min_ps, max_ps=job.max_ps, ps_cpus=job.ps_cpus,
            ps_mem_gb=job.ps_mem_gb,
            ps_allocation={node_name(node_names, n): c for n, c in alloc.ps},
            target={node_name(node_names, n): c for n, c in load_alloc(job.target).workers},
            decision=job.decision,
            est_start_at=job.est_start_at if job.state in _WAITING else None,
            est_finish_at=None if job.state in TERMINAL else job.est_finish_at,
            est_start_lo_at=job.est_start_lo_at if job.state in _WAITING else None,
            est_start_hi_at=job.est_start_hi_at if job.state in _WAITING else None,
            os_user=job.os_user, cwd=job.cwd,
            queue_position=job.queue_position if job.state in _WAITING and not job.target
            else None,
            env=json.loads(job.env or "{}"),
            attainment=live_attainment(job, time.time() if now is None else now),
            progress=progress,
            cluster=job.cluster, to_cluster=job.to_cluster, copy_bytes=job.copy_bytes,
            copy_s=job.copy_s, memory_max=job.memory_max, pids_max=job.pids_max,
            time_limit_s=job.time_limit_s, hang_s=job.hang_s, max_retries=job.max_retries,
            run_s=job.run_s or 0.0, retry_at=job.retry_at, array_id=job.array_id,
            array_index=job.array_index,
            gpu_types=[t for t in (job.gpu_types or "").split(",") if t],
        )


_WAITING = frozenset({"queued", "preempted"})


def type_refusal(gpu_types: list[str], most_gpus: int, type_gpus: dict[str, int]) -> str | None:
    """Why a job that may run on ``gpu_types`` (empty: any) and asks for up to ``most_gpus``
    cannot run on a cluster of ``type_gpus`` (each accelerator type's GPUs, "" for untyped
    nodes), or None if it can. A job runs on one type at a time, so the most it asks for must fit
    in one allowed type's GPUs."""
    known = sorted(t for t in type_gpus if t)
    shown = ", ".join(known) if known else "none: the nodes are untyped"
    missing = [t for t in gpu_types if t not in type_gpus]
    if missing:
        return (f"no node has accelerator type {', '.join(missing)} (known types: {shown})")
    if not known:
        return None
    allowed = gpu_types or known
    best = max(type_gpus[t] for t in allowed)
    if most_gpus > best:
        each = ", ".join(f"{t}: {type_gpus[t]}" for t in allowed)
        return (f"{most_gpus} GPUs is more than any type it may run on has ({each}); a job "
                "runs on GPUs of one type")
    return None


def node_name(names: list[str], position: int) -> str:
    return names[position] if 0 <= position < len(names) else f"#{position}"


class TransitionOut(BaseModel):
    src: str
    dst: str
    at: float
    attempt: int
    reason: str

    @staticmethod
    def of(t: Transition) -> TransitionOut:
        return TransitionOut(src=t.src, dst=t.dst, at=t.at, attempt=t.attempt, reason=t.reason)


class PlanStepOut(BaseModel):
    """One action of the policy's plan the controller enacted for the job (a slot's allocation,
    under OASiS): its kind and the worker and parameter-server counts after it."""

    at: float
    kind: str
    workers: int
    ps: int

    @staticmethod
    def of(d: Decision) -> PlanStepOut:
        return PlanStepOut(at=d.at, kind=d.kind, workers=d.workers, ps=d.ps)


class JobDetail(JobOut):
    transitions: list[TransitionOut]
    plan: list[PlanStepOut] = Field(default_factory=list)


class LogsOut(BaseModel):
    text: str
    next_offset: int
    finished: bool  # the job is in a terminal state: no more output will come


class NodeOut(BaseModel):
    name: str
    gpus: int
    used: int
    free: int
    state: str
    jobs: list[int]
    cluster: str = ""  # in a fleet (else "")
    region: str = ""
    gpu_type: str = ""  # its accelerators' type ("": untyped)
    role: str = "any"  # what it hosts: "any", "worker" or "ps"
    cpus: float = 0.0  # its CPU cores and memory (GiB), which parameter servers are placed by
    mem_gb: float = 0.0
    ps: int = 0  # parameter servers on it


def live_attainment(job: Job, now: float) -> float | None:
    """Attainment so far: seconds of work done at the requested size (settled, plus the current
    hold at its share of the requested workers) over the time since submission."""
    done = job.work_done
    if job.holding_since is not None and job.finished_at is None and job.gpus:
        done += max(0.0, now - job.holding_since) * load_alloc(job.allocation).num_workers / job.gpus
    if done <= 0 and job.state in ("rejected", "cancelled"):
        return None
    end = job.finished_at if job.finished_at is not None else now
    return attainment(done, max(0.0, end - job.submitted_at))


class SegmentOut(BaseModel):
    job: int
    attempt: int
    start: float
    end: float | None  # None: it still holds the allocation
    allocation: dict[str, int]  # node name -> workers
    ended: str  # the state it went to ("" while it holds)


class MarkOut(BaseModel):
    job: int
    at: float
    kind: str  # "preempt", "resize" or "migrate"
    reason: str


class HistoryOut(BaseModel):
    """The timeline (``runtime.history``) from ``since`` to ``now``: the caller's jobs' holds and
    marks (every job's for an admin); GPUs held and jobs waiting over every job, as step series
    of ``[time, value]`` (wall seconds; the value holds until the next point)."""

    since: float
    now: float
    total_gpus: int
    segments: list[SegmentOut]
    marks: list[MarkOut]
    utilization: list[tuple[float, int]]
    waiting: list[tuple[float, int]]
    # per tier with a target: the share of its jobs finished so far that met it, at each finish
    sla_met: dict[str, list[tuple[float, float]]]


class TierOut(BaseModel):
    tier: str
    target: float | None  # the attainment a job of the tier must reach (None: best effort)
    jobs: int  # jobs of the tier in the window (submitted, or not finished, since ``since``)
    met: int  # of them, those whose attainment so far meets the target
    mean_attainment: float | None


class ClusterOut(BaseModel):
    """The cluster at a glance: its policy, GPUs, SLA attainment per tier over every job of the
    window, and what the estimated starts assume."""

    policy: str
    total_gpus: int
    used_gpus: int
    tiers: list[TierOut]
    forecast_basis: str


class DelayOut(BaseModel):
    """A job the dry-run submission would delay: seconds later it would start (a waiting job;
    None: not within the forecast) and finish."""

    job_id: int
    start_s: float | None
    finish_s: float | None


class DryRunOut(BaseModel):
    """``POST /v1/jobs/dry-run``: what submitting the job now would do (it is not stored).
    ``admissible``: ``infeasible`` (it cannot run here; ``reason`` says why), ``fits-now``,
    ``needs-preemption`` (it starts now by stopping or shrinking others) or ``waits``; its
    estimated start and finish (wall seconds; None: not within the forecast), the jobs it would
    delay, the policy forecast, and the forecast's basis."""

    admissible: str
    reason: str
    est_start_at: float | None
    est_finish_at: float | None
    delays: list[DelayOut]
    policy: str
    basis: str
