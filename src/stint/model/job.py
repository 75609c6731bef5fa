"""Job specifications: what a user submits. Immutable; progress lives elsewhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from stint.model.resources import Resources
from stint.model.utility import ConstantUtility, Utility


class Tier(StrEnum):
    """Singularity's SLA tiers: premium is never preempted for a lower tier; basic is preempted first."""

    PREMIUM = "premium"
    STANDARD = "standard"
    BASIC = "basic"


TIER_RANK = {Tier.PREMIUM: 0, Tier.STANDARD: 1, Tier.BASIC: 2}

ONE_GPU = Resources(gpu=1)  # the default per-worker demand


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One training job.

    ``work`` is in the units of the performance model that will run it (for the scaling model:
    seconds of training at ``requested_workers``). ``min_workers``/``max_workers`` bound elastic
    resizing; a rigid job has min == max == requested. ``num_ps``/``ps_demand`` describe
    parameter-server jobs (OASiS); ``ps_demand`` is None for all-reduce jobs.
    """

    job_id: str
    arrival_s: float
    work: float
    requested_workers: int = 1
    min_workers: int = 1
    max_workers: int = 1
    worker_demand: Resources = ONE_GPU
    ps_demand: Resources | None = None
    application: str = "unknown"
    utility: Utility = field(default_factory=ConstantUtility)
    priority: float = 1.0
    tier: Tier = Tier.STANDARD
    user: str = "default"
    vc: str = ""
    batch_size: int = 0
    # Recorded run time at requested_workers, if the trace carries it (oracle for SJF/SRTF).
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if not self.job_id:
            raise ValueError("job_id must not be empty")
        if self.work <= 0:
            raise ValueError(f"job {self.job_id}: work must be positive (got {self.work})")
        if self.arrival_s < 0:
            raise ValueError(f"job {self.job_id}: arrival_s must be >= 0 (got {self.arrival_s})")
        if not 1 <= self.min_workers <= self.requested_workers <= self.max_workers:
            raise ValueError(
                f"job {self.job_id}: need 1 <= min_workers <= requested_workers <= max_workers "
                f"(got {self.min_workers}, {self.requested_workers}, {self.max_workers})"
            )

    @property
    def gpus_per_worker(self) -> int:
        return int(self.worker_demand.gpu)

    @property
    def elastic(self) -> bool:
        return self.min_workers < self.max_workers
