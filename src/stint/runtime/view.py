"""The adapter between store rows and the policy interface: JobSpec/JobStatus/ClusterView."""

from __future__ import annotations

import json
from dataclasses import dataclass

from stint.model.allocation import EMPTY, Allocation
from stint.model.cluster import Cluster, Node
from stint.model.job import JobSpec, Tier
from stint.model.resources import Resources
from stint.model.utility import ConstantUtility, DeadlineUtility, Utility
from stint.policies.base import JobStatus, Phase
from stint.runtime.states import HOLDING, JobState
from stint.runtime.store import load_alloc
from stint.runtime.tables import Job

# Live jobs do not declare how much work they have: every job counts as one unit, and progress is
# not reported back (policies that rank by remaining work see ties and fall back to arrival order).
LIVE_WORK = 1.0


@dataclass(frozen=True, slots=True)
class LinearScaling:
    """Live performance model: throughput proportional to workers, relative to the request."""

    def rate(self, spec: JobSpec, allocation: Allocation) -> float:
        return allocation.num_workers / max(1, spec.requested_workers)


def cluster_of(nodes: list[tuple[str, int]]) -> Cluster:
    return Cluster(tuple(Node(name, Resources(gpu=gpus)) for name, gpus in nodes))


def spec_of(job: Job, user: str) -> JobSpec:
    utility: Utility = ConstantUtility(job.priority)
    if job.deadline_s is not None:
        utility = DeadlineUtility(job.priority, job.deadline_s)
    return JobSpec(
        job_id=str(job.id),
        arrival_s=max(0.0, job.submitted_at),
        work=LIVE_WORK,
        requested_workers=job.gpus,
        min_workers=job.min_gpus,
        max_workers=job.max_gpus,
        worker_demand=Resources(gpu=1),
        application=job.name or "job",
        utility=utility,
        priority=job.priority,
        tier=Tier(job.tier),
        user=user,
    )


def status_of(job: Job, user: str) -> JobStatus:
    state = JobState(job.state)
    holding = state in HOLDING
    phase = Phase.RUNNING if holding else Phase.QUEUED if job.attempt == 0 else Phase.PAUSED
    return JobStatus(
        spec=spec_of(job, user),
        phase=phase,
        allocation=load_alloc(job.allocation) if holding else EMPTY,
        attained_gpu_s=job.attained_gpu_s,
        first_start_s=job.first_start_at,
        last_change_s=job.last_change_at,
        preemptions=job.preemptions,
    )


def held_slots(job: Job) -> dict[int, list[int]]:
    return {int(k): v for k, v in json.loads(job.slots or "{}").items()}
