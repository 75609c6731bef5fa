"""ORM rows of the store. The Alembic migrations in ``migrations/versions`` create these tables;
a change here needs a new migration (``tests/runtime/test_store.py`` checks that they agree)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    # The OS account the user's jobs run as (None: the control plane's own, in single-user mode).
    os_user: Mapped[str | None] = mapped_column(String(64), nullable=True)


class Token(Base):
    """One API token per user, stored as the sha256 of a random 32-byte secret."""

    __tablename__ = "tokens"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)  # index in the cluster (Allocation refers to it)
    gpus: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default="ready")
    # In a fleet (``serve --fleet``): the node's cluster and region ("" for a single cluster);
    # ``position`` is then its index within its cluster, and ``name`` is ``CLUSTER/NODE``.
    cluster: Mapped[str] = mapped_column(String(64), default="", server_default="")
    region: Mapped[str] = mapped_column(String(64), default="", server_default="")
    gpu_type: Mapped[str] = mapped_column(String(64), default="", server_default="")  # "" untyped
    # What it hosts ("any", "worker" or "ps": ``model.Node.role``) and its CPU cores and memory
    # (GiB), which parameter servers are placed by (``executor.base.node_resources``).
    role: Mapped[str] = mapped_column(String(16), default="any", server_default="any")
    cpus: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    mem_gb: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class Job(Base):
    """A submitted job: its spec (immutable after submission) and its lifecycle state.

    ``allocation``/``target`` are JSON lists of ``[node_position, workers]`` pairs: the current (or,
    once stopped, the last) allocation, and where the job goes once its current checkpoint
    completes (a migration or a resize). ``slots`` are the accelerator slots it holds per node.
    ``cancel_requested``/``preempt_requested``/``pin_*`` are operator requests written by the API;
    every other lifecycle column is written by the controller only.
    """

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_state", "state"), Index("ix_jobs_user_id", "user_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(128), default="")
    command: Mapped[str] = mapped_column(Text)  # JSON list of argv strings
    gpus: Mapped[int] = mapped_column(Integer)
    min_gpus: Mapped[int] = mapped_column(Integer)
    max_gpus: Mapped[int] = mapped_column(Integer)
    tier: Mapped[str] = mapped_column(String(16))
    priority: Mapped[float] = mapped_column(Float, default=1.0)
    deadline_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    os_user: Mapped[str | None] = mapped_column(String(64), nullable=True)  # runs as; None = ours
    cwd: Mapped[str | None] = mapped_column(Text, nullable=True)  # None: the account's home
    env: Mapped[str] = mapped_column(Text, default="{}")  # JSON {name: value}, added last

    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    allocation: Mapped[str] = mapped_column(Text, default="[]")
    slots: Mapped[str] = mapped_column(Text, default="{}")  # JSON {node_position: [slot, ...]}
    target: Mapped[str | None] = mapped_column(Text, nullable=True)
    stop_purpose: Mapped[str | None] = mapped_column(String(16), nullable=True)
    stop_deadline: Mapped[float | None] = mapped_column(Float, nullable=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    first_start_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_change_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    attained_gpu_s: Mapped[float] = mapped_column(Float, default=0.0)
    holding_since: Mapped[float | None] = mapped_column(Float, nullable=True)

    # Declared by the submitter (None: not declared): the run time in seconds at ``gpus`` workers,
    # the training steps (the SDK reports its step), the SDK's logical ranks (its worker counts
    # are their divisors). ``work_done`` is seconds of work at ``gpus`` workers, settled whenever
    # the job stops holding GPUs (the controller's progress model, the same as the simulator's).
    est_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    total_steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    logical_ranks: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Parameter servers of a ``stint.torch.ps`` job at ``gpus`` workers (None: not one).
    ps_count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Its PS counts' bounds (None: ``ps_count`` only) and one PS's CPU cores and memory (GiB;
    # None: ``view.PS_CPUS``/``PS_MEM_GB``). A plan that places its PSs (OASiS on a cluster with
    # PS nodes) has the controller launch them there, beside the workers; otherwise worker 0
    # starts ``ps_count`` of them.
    min_ps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_ps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ps_cpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    ps_mem_gb: Mapped[float | None] = mapped_column(Float, nullable=True)
    work_done: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    decision: Mapped[str | None] = mapped_column(Text, nullable=True)  # the policy's ``explain``
    # The controller's forecast (``sim.forecast``), wall seconds; None: none, or not within it.
    est_start_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    est_finish_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Its place among the waiting jobs in the order the forecast starts them (1 = next; None:
    # not waiting, or no forecast), written with the forecast (``view.queue_positions``).
    queue_position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The estimated start's band (wall seconds): the forecast with the fitted costs' and the
    # declared lengths' low and high quantiles (``sim.forecast.band``); None as ``est_start_at``.
    est_start_lo_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    est_start_hi_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    preempt_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    pin_workers: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pin_node: Mapped[str | None] = mapped_column(String(128), nullable=True)

    # In a fleet: the cluster the job is placed on (None: not yet placed; always None for a
    # single cluster), the cluster it is being moved to (set by the global scheduler or an
    # admin's ``migrate --to-cluster``; cleared when it arrives), and its checkpoint's last copy
    # between clusters (bytes, seconds from the first file asked to the last verified).
    cluster: Mapped[str | None] = mapped_column(String(64), nullable=True)
    to_cluster: Mapped[str | None] = mapped_column(String(64), nullable=True)
    copy_bytes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    copy_s: Mapped[float | None] = mapped_column(Float, nullable=True)

    # What the submitter asked of the job's bounds (None: the operator's default, ``[limits]``
    # and ``[controller]``): a worker's memory (bytes) and processes, the time it may hold GPUs
    # over all its attempts, how long its step may stall before it counts as hung (0: never),
    # and the failures it survives.
    memory_max: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    pids_max: Mapped[int | None] = mapped_column(Integer, nullable=True)
    time_limit_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    hang_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_retries: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Written by the controller: seconds it held GPUs over its ended attempts (its time limit's
    # clock), when a failed job may be retried (None: it may run; the policy does not see it
    # before), and its launches the OS refused in a row for want of processes or memory.
    run_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    retry_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    refusals: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # A task of a job array (``stint submit --array``): the array's id (its first task's job
    # id), the task's index (``STINT_ARRAY_INDEX``), and how many of the array's tasks may hold
    # GPUs at once (None: no limit). None for a job of its own.
    array_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    array_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    array_parallel: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The accelerator types it may run on, comma-separated ("": any; ``stint submit --gpu-type``).
    gpu_types: Mapped[str] = mapped_column(String(1100), default="", server_default="")


class Transition(Base):
    __tablename__ = "transitions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    src: Mapped[str] = mapped_column(String(16))
    dst: Mapped[str] = mapped_column(String(16))
    at: Mapped[float] = mapped_column(Float)
    attempt: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text, default="")
    # For a transition to ``starting``: the allocation the new attempt holds (as ``Job``'s);
    # None for every other one (the timeline and utilization series read it).
    allocation: Mapped[str | None] = mapped_column(Text, nullable=True)


class StoreMeta(Base):
    """Facts about the store itself: ``store_id`` (its identity, written once by the migration)
    and ``epoch`` (the control plane's time origin, wall seconds; ``Store.epoch``)."""

    __tablename__ = "store_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Override(Base):
    """An operator command (preempt, resize, migrate, cancel), kept for the record."""

    __tablename__ = "overrides"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    value: Mapped[str] = mapped_column(String(128), default="")
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    at: Mapped[float] = mapped_column(Float)


class Attempt(Base):
    """One attempt of a job as the controller measured it (the live costs are fitted from these,
    ``runtime/measured.py``): launched (the transition to ``starting``) on ``workers``; its first
    SDK report of a step of its own (``first_step_at``, ``first_step``: None for a job that
    reports no steps); the request to checkpoint and stop (``stop_at``); the exit the
    controller applied (``ended_at``, ``outcome``) and the SDK's step then (``end_step``).
    ``resumed``: the attempt carries on from an earlier one (a resume, resize or migration)."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "attempt", name="uq_attempts_job_attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    workers: Mapped[int] = mapped_column(Integer)
    resumed: Mapped[bool] = mapped_column(Boolean)
    launched_at: Mapped[float] = mapped_column(Float)
    first_step_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    first_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stop_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    end_step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)


class Decision(Base):
    """One action of a plan the controller accepted (``reconcile.Action``: kind, job, the worker
    and parameter-server counts after it), in the order it enacted them (``id``); ``stint
    replay`` compares them with the simulator's."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(16))
    workers: Mapped[int] = mapped_column(Integer)
    ps: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
