"""The policy interface shared by the simulator and the live control plane.

A policy is a function of a read-only snapshot that returns a ``Plan`` (STYLE principle 1): no I/O,
no clock (``view.now`` is the time), no import of ``stint.sim`` or ``stint.runtime``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.cluster import Cluster
from stint.model.job import JobSpec


class Phase(StrEnum):
    """Where an active job is, as a policy sees it."""

    QUEUED = "queued"  # arrived, never run
    RUNNING = "running"  # has an allocation (possibly still starting)
    PAUSED = "paused"  # ran before, preempted, waiting to resume


@dataclass(slots=True)
class JobStatus:
    """An active job's progress. Owned and updated by the mechanism; policies must only read it.

    ``work_done`` is in the job's work units; ``attained_gpu_s`` is GPU-seconds received so far
    (Tiresias' 2D attained service); ``last_change_s`` is when the allocation last changed.
    """

    spec: JobSpec
    phase: Phase = Phase.QUEUED
    allocation: Allocation = EMPTY
    work_done: float = 0.0
    attained_gpu_s: float = 0.0
    first_start_s: float | None = None
    last_change_s: float = 0.0
    preemptions: int = 0
    # Optional lazy progress (the simulator uses it so that an event costs O(changed jobs)): when
    # ``as_of_s`` is set, ``work_done``/``attained_gpu_s`` are as of that time and the job has
    # progressed since at ``rate`` work units/s while holding ``allocation``. Read them through
    # ``work_done_at(now)``/``attained_gpu_s_at(now)``, which are exact either way.
    rate: float = 0.0
    as_of_s: float | None = None

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def held_gpus(self) -> int:
        """GPUs the job's workers hold now."""
        return sum(c for _, c in self.allocation.workers) * self.spec.gpus_per_worker

    def work_done_at(self, now: float) -> float:
        """Work done by ``now`` (equals ``work_done`` when progress is not lazy)."""
        if self.as_of_s is None:
            return self.work_done
        return min(self.spec.work, self.work_done + self.rate * (now - self.as_of_s))

    def attained_gpu_s_at(self, now: float) -> float:
        """GPU-seconds received by ``now`` (Tiresias' attained service)."""
        if self.as_of_s is None:
            return self.attained_gpu_s
        return self.attained_gpu_s + self.held_gpus * (now - self.as_of_s)

    @property
    def remaining_work(self) -> float:
        return max(0.0, self.spec.work - self.work_done)


class PerfModel(Protocol):
    """How fast a job trains on an allocation, in its work units per second."""

    def rate(self, spec: JobSpec, allocation: Allocation) -> float: ...


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a policy sees: the time, the cluster, the active jobs in arrival order, free GPUs.

    ``free_gpus[i]`` is node i's GPUs not held by any job in ``jobs``. ``jobs`` is a live
    read-only sequence; ``changed`` lists the ids of jobs that arrived or finished since the last
    call, so incremental policies need not rescan everything.

    Optional, for incremental policies: ``by_id`` maps active job ids to their status (live,
    read-only). When a mechanism sets it, it also promises that ``changed`` is complete: every job
    that arrived, finished, or whose allocation, phase or rate changed (including through the
    previous plan) since the previous call with the same ``stream`` token. A policy that keeps an
    index must rebuild it when ``by_id`` is None or ``stream`` differs from the last call's.
    ``free_resources[i]``, if set, is node i's free (gpu, cpu, mem_gb, net_gbps).
    """

    now: float
    cluster: Cluster
    jobs: Sequence[JobStatus]
    free_gpus: Sequence[int]
    perf: PerfModel
    changed: Sequence[str] = ()
    by_id: Mapping[str, JobStatus] | None = None
    stream: int | None = None
    free_resources: Sequence[Sequence[float]] | None = None


class Policy(Protocol):
    """A scheduling policy. ``tick_s`` is the period of its slot ticks, or None if event-driven."""

    name: str
    tick_s: float | None

    def plan(self, view: ClusterView) -> Plan:
        """Decide allocations (and admissions) at ``view.now``."""
        ...
