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
from stint.runtime.states import HOLDING
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


_TIERS = {str(t): t for t in Tier}  # Tier(value) is slow enough to matter for 10,000 jobs
_HOLDING = frozenset(str(s) for s in HOLDING)
_ONE_GPU = Resources(gpu=1)


def spec_of(job: Job, user: str) -> JobSpec:
    # Read the loaded column values straight from the instance dict: the ORM's attribute
    # descriptors cost more than the rest of this function for a 10,000-job pass.
    d = job.__dict__
    utility: Utility = ConstantUtility(d["priority"])
    if d["deadline_s"] is not None:
        utility = DeadlineUtility(d["priority"], d["deadline_s"])
    return JobSpec(
        job_id=str(d["id"]),
        arrival_s=max(0.0, d["submitted_at"]),
        work=LIVE_WORK,
        requested_workers=d["gpus"],
        min_workers=d["min_gpus"],
        max_workers=d["max_gpus"],
        worker_demand=_ONE_GPU,
        application=d["name"] or "job",
        utility=utility,
        priority=d["priority"],
        tier=_TIERS[d["tier"]],
        user=user,
    )


def status_of(job: Job, user: str) -> JobStatus:
    d = job.__dict__
    holding = d["state"] in _HOLDING
    phase = Phase.RUNNING if holding else Phase.QUEUED if d["attempt"] == 0 else Phase.PAUSED
    return JobStatus(
        spec=spec_of(job, user),
        phase=phase,
        allocation=load_alloc(d["allocation"]) if holding else EMPTY,
        attained_gpu_s=d["attained_gpu_s"],
        first_start_s=d["first_start_at"],
        last_change_s=d["last_change_at"],
        preemptions=d["preemptions"],
    )


def held_slots(job: Job) -> dict[int, list[int]]:
    return {int(k): v for k, v in json.loads(job.slots or "{}").items()}
