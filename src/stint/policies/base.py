"""The policy interface shared by the simulator and the live control plane.

A policy is a function of a read-only snapshot that returns a ``Plan`` (STYLE principle 1): no I/O,
no clock (``view.now`` is the time), no import of ``stint.sim`` or ``stint.runtime``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from stint.model.allocation import EMPTY, Allocation, Plan, Wait, WaitCode
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.model import PerfModel
from stint.placement.free_index import FreeIndex
from stint.policies.knowledge import known_total


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
    # What the policy may know of the job's whole work, in work units (``policies.knowledge``):
    # set by the mechanism that builds the status (the user's declaration or the learned
    # estimate; the true work only under oracle knowledge). None: ``spec.work``, which for a live
    # job is its declared length. Read it through ``known_work``/``known_remaining_at``.
    est_work: float | None = None
    # The job's own report says it runs its last step or is past its loop (the live SDK's
    # status file: ``step + 1 >= total_steps``, or ``finished``): it is ending by itself. The live
    # controller refuses a plan's resize, migration, preemption or rejection of it.
    finishing: bool = False

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def held_gpus(self) -> int:
        """GPUs the job's workers hold now."""
        return self.allocation.num_workers * self.spec.gpus_per_worker

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

    def settle(self, now: float) -> None:
        """Fold lazy progress up to ``now`` into ``work_done``/``attained_gpu_s`` (mechanisms
        only: a policy never writes a status)."""
        since = self.as_of_s if self.as_of_s is not None else now
        dt = now - since
        if dt > 0:
            self.work_done += self.rate * dt
            self.attained_gpu_s += self.held_gpus * dt
        self.as_of_s = now

    @property
    def remaining_work(self) -> float:
        """The true remaining work (mechanisms only: a policy reads ``known_remaining_at``)."""
        return max(0.0, self.spec.work - self.work_done)

    @property
    def known_work(self) -> float:
        """The job's whole work as the policy may know it (its estimate, not its truth)."""
        return self.spec.work if self.est_work is None else self.est_work

    def known_total_at(self, now: float) -> float:
        """The believed whole work at ``now``: the estimate, doubled each time the work done
        passes it (``knowledge.known_total``)."""
        done = self.work_done_at(now)
        est = self.known_work
        return est if done <= est else known_total(est, done)

    def known_remaining_at(self, now: float) -> float:
        """Remaining work as the policy may know it at ``now``."""
        return self.known_total_at(now) - self.work_done_at(now)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a policy sees: the time, the cluster, the active jobs in arrival order, free GPUs.

    ``free_gpus[i]`` is node i's GPUs not held by any job in ``jobs``. ``jobs`` is a live
    read-only sequence; ``changed`` lists the ids of jobs that arrived or finished since the last
    call, so incremental policies need not rescan everything.

    Optional, for incremental policies: ``by_id`` maps active job ids to their status (live,
    read-only). When a mechanism sets it, it also promises that ``changed`` is complete: every job
    that arrived, finished, or whose allocation, phase or rate changed (including through the
    previous plan) since the previous call with the same ``stream`` token. Two tokens, two
    promises:
    - ``stream`` changes when ``changed`` is not complete (the live cache reloaded every row): a
      policy that keeps an *index* of the jobs must rebuild it when ``by_id`` is None or
      ``stream`` differs from the last call's;
    - ``history`` changes when the jobs' *history* is not the one the policy saw before (a new
      run, a new store): only then may a policy forget what it remembers of jobs it saw (e.g.
      Tiresias' queue-entry times). Same ``history``, same jobs, same past.
    ``free_gpus`` and ``free_resources`` (node i's free (gpu, cpu, mem_gb, net_gbps)) come from
    the mechanism's capacity ledger (``stint.placement.ledger``); a node that is down shows none.
    ``free_index``, when set, is the ledger's index of nodes by free GPUs (consistent with
    ``free_gpus``; read-only): placement on a ``ScratchFree`` over it needs no scan of the nodes.
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
    history: int | None = None
    down_nodes: frozenset[int] = frozenset()  # nodes that are down now (nothing may go there)
    explain: bool = False  # the mechanism wants ``Plan.waiting`` (why each waiting job waits)
    free_index: FreeIndex | None = None


def unexplained_wait(spec: JobSpec, free_gpus: int, policy: str) -> Wait:
    """Why a job waits when its policy gave no reason (the mechanism's own account): it does not
    fit on the GPUs free after the pass, or it would, and the policy keeps it back."""
    need = spec.min_workers * int(spec.worker_demand.gpu)
    if need > free_gpus:
        return Wait(WaitCode.CAPACITY, f"needs {need} GPUs, {free_gpus} free")
    return Wait(WaitCode.HELD, f"{policy} starts other jobs first ({free_gpus} GPUs free, "
                               f"it needs {need})")


class Policy(Protocol):
    """A scheduling policy: every member a mechanism reads is declared here.

    ``tick_s`` is the period of its slot ticks (the mechanism calls ``plan`` at every multiple of
    it while jobs are active), or None if it is event-driven. ``lazy_progress`` is True if the
    policy reads progress only through ``JobStatus.work_done_at``/``attained_gpu_s_at`` (then the
    mechanism need not settle every job before each call). ``next_due`` says when the policy's
    next time-driven change can happen (ticks before it are skipped; None: never).
    ``PolicyBase`` gives the defaults.
    """

    name: str
    tick_s: float | None
    lazy_progress: bool

    def next_due(self) -> float | None:
        """Earliest time a tick could change the plan; None if no tick can."""
        ...

    def plan(self, view: ClusterView) -> Plan:
        """Decide allocations (and admissions) at ``view.now``."""
        ...


class PolicyBase:
    """Defaults for ``Policy``'s members: event-driven, progress read directly, due at any tick."""

    name: str = "policy"
    tick_s: float | None = None
    lazy_progress: bool = False

    def next_due(self) -> float | None:
        return 0.0
