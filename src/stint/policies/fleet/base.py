"""The global scheduler's interface: a function of a fleet snapshot, like the cluster ``Policy``.

No I/O, no clock (``view.now`` is the time). The mechanism (``stint.sim.fleet``) places what the
plan says, charges each placement and move its copy time, and leaves the rest to each cluster's
own policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from stint.model.fleet import Fleet, FleetJob


@dataclass(frozen=True, slots=True)
class ClusterState:
    """One cluster as the global scheduler sees it.

    ``assigned_gpus`` are the GPUs asked by every job placed there and not done (running,
    waiting or on its way); ``backlog_gpu_s`` their expected GPU-seconds (each job's ``est_s`` x
    GPUs, whole)."""

    index: int
    gpus: int  # GPUs up now
    busy_gpus: int
    assigned_gpus: int
    backlog_gpu_s: float
    available: bool  # up and reachable: may take placements and moves

    def expected_wait_s(self, extra_gpus: int, assigned: int | None = None, backlog: float | None = None) -> float:
        """The expected wait of a job asking ``extra_gpus`` more: none if what is asked fits,
        else the demand over capacity drained at the cluster's pace (its GPUs over the
        GPU-weighted mean expected run time of its jobs). ``assigned``/``backlog`` override
        the snapshot's figures (a scheduler's running tally)."""
        a = self.assigned_gpus if assigned is None else assigned
        b = self.backlog_gpu_s if backlog is None else backlog
        if self.gpus <= 0:
            return float("inf")
        excess = a + extra_gpus - self.gpus
        if excess <= 0 or a <= 0:
            return 0.0
        return excess * (b / a) / self.gpus


@dataclass(frozen=True, slots=True)
class Pending:
    """A job the global scheduler must place: an arrival (``at`` is None, nothing to copy) or a
    job whose cluster failed or was unreachable (``at``: where its last checkpoint is)."""

    job: FleetJob
    at: int | None
    has_checkpoint: bool


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job waiting (no GPUs) in cluster ``at`` since ``since_s``."""

    job: FleetJob
    at: int
    since_s: float
    has_checkpoint: bool


@dataclass(frozen=True, slots=True)
class FleetView:
    now: float
    fleet: Fleet
    clusters: tuple[ClusterState, ...]
    pending: Sequence[Pending]
    waiting: Sequence[Waiting] = ()  # filled only on the scheduler's period (``period_s``)


@dataclass(slots=True)
class GlobalPlan:
    """``place``: pending job -> cluster (a pending job left out is held and offered again);
    ``move``: waiting job -> another cluster."""

    place: dict[str, int] = field(default_factory=dict)
    move: dict[str, int] = field(default_factory=dict)


class GlobalPolicy(Protocol):
    name: str
    period_s: float | None  # how often to be shown the waiting jobs (None: never; no moves)

    def plan(self, view: FleetView) -> GlobalPlan: ...


def move_cost_s(fleet: Fleet, job: FleetJob, src: int | None, dst: int, has_checkpoint: bool) -> float:
    """Seconds before a job can run on ``dst``: its copies (``copy_s``), plus the restart
    (``checkpoint.restart_s``) if it moves a checkpoint to another cluster."""
    cost = copy_s(fleet, job, src, dst, has_checkpoint)
    if has_checkpoint and src is not None and src != dst:
        cost += fleet.checkpoint.restart_s
    return cost


def copy_s(fleet: Fleet, job: FleetJob, src: int | None, dst: int, has_checkpoint: bool) -> float:
    """Seconds of copying before a job can enter ``dst``: its checkpoint from ``src`` if it has
    one, plus its data set from its data cluster if ``dst`` is not it."""
    cost = 0.0
    if has_checkpoint and src is not None and src != dst:
        cost += fleet.transfer_s(job.ckpt_gb, src, dst)
    if dst != job.data_cluster:
        cost += fleet.transfer_s(job.data_gb, job.data_cluster, dst)
    return cost


def link_gbps(fleet: Fleet) -> list[list[float]]:
    """``fleet.bandwidth_gbps(a, b)`` of every pair of clusters, as rows by ``a``."""
    n = len(fleet.clusters)
    return [[fleet.bandwidth_gbps(a, b) for b in range(n)] for a in range(n)]


def move_costs_s(fleet: Fleet, gbps: Sequence[Sequence[float]], job: FleetJob, src: int | None,
                 has_checkpoint: bool) -> list[float]:
    """``move_cost_s`` to every cluster, by index, the same floats (``gbps``: ``link_gbps(fleet)``),
    for a scheduler that weighs every cluster for each job: one step per cluster, not four calls."""
    moving = has_checkpoint and src is not None
    ckpt_8, data_8, data = job.ckpt_gb * 8.0, job.data_gb * 8.0, job.data_cluster
    from_src, from_data = gbps[src] if src is not None else (), gbps[data]
    restart = fleet.checkpoint.restart_s
    out = []
    for dst in range(len(fleet.clusters)):
        cost = 0.0
        moved = moving and src != dst
        if moved:
            cost += ckpt_8 / from_src[dst]  # (``Fleet.transfer_s``: gb * 8.0 / gbps)
        if dst != data:
            cost += data_8 / from_data[dst]
        if moved:
            cost += restart
        out.append(cost)
    return out


def fits(fleet: Fleet, state: ClusterState, job: FleetJob) -> bool:
    """The cluster is usable and the job is not larger than its GPUs up."""
    return state.available and job.gpus <= state.gpus
