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
    # Recorded run time at requested_workers, if the trace carries it (the truth: policies see
    # it only under ``--knowledge oracle``, through ``JobStatus.est_work``).
    duration_s: float | None = None
    # The worker counts the job can run on, ascending; empty means every count in min..max. An
    # SDK job runs on the divisors of its logical world size (``divisor_counts``).
    worker_counts: tuple[int, ...] = ()
    # The run time the user declared at requested_workers (a trace's ``est_s`` column,
    # ``stint submit --est-s``): what a policy may know of the job's length (``policies.knowledge``).
    est_s: float | None = None
    # The accelerator types the job may run on (``stint submit --gpu-type a100,v100``); empty:
    # any. On a typed cluster it runs on one of them at a time (``placement.types``).
    gpu_types: tuple[str, ...] = ()
    # The PS counts a parameter-server job may run with (``stint submit --min-ps/--max-ps``);
    # 0: no bound (the policy's own rule, e.g. OASiS's ``ceil(y b/B)``, at most y).
    min_ps: int = 0
    max_ps: int = 0

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
        if self.est_s is not None and not self.est_s > 0:
            raise ValueError(f"job {self.job_id}: est_s must be positive (got {self.est_s})")
        if self.min_ps < 0 or self.max_ps < 0 or (self.max_ps and self.min_ps > self.max_ps):
            raise ValueError(f"job {self.job_id}: need 0 <= min_ps <= max_ps (got {self.min_ps}, "
                             f"{self.max_ps})")
        counts = self.worker_counts
        if counts and (list(counts) != sorted(set(counts)) or counts[0] < self.min_workers
                       or counts[-1] > self.max_workers or self.requested_workers not in counts):
            raise ValueError(
                f"job {self.job_id}: worker_counts {counts} must be ascending, within "
                f"min_workers..max_workers ({self.min_workers}..{self.max_workers}) and include "
                f"requested_workers ({self.requested_workers})"
            )

    def allows_type(self, gpu_type: str) -> bool:
        """True if the job may run on accelerators of ``gpu_type`` (always, without a list)."""
        return not self.gpu_types or gpu_type in self.gpu_types

    @property
    def gpus_per_worker(self) -> int:
        return int(self.worker_demand.gpu)

    @property
    def elastic(self) -> bool:
        return self.min_workers < self.max_workers

    def can_run_on(self, workers: int) -> bool:
        """True if the job can run on ``workers`` workers."""
        if self.worker_counts:
            return workers in self.worker_counts
        return self.min_workers <= workers <= self.max_workers

    def feasible_counts(self) -> tuple[int, ...]:
        """Every worker count the job can run on, ascending."""
        return self.worker_counts or tuple(range(self.min_workers, self.max_workers + 1))

    def largest_feasible(self, workers: int) -> int:
        """The largest count the job can run on that is at most ``workers`` (0 if none)."""
        if not self.worker_counts:
            return min(workers, self.max_workers) if workers >= self.min_workers else 0
        best = 0
        for c in self.worker_counts:
            if c <= workers:
                best = c
        return best


def divisor_counts(logical: int, low: int, high: int) -> tuple[int, ...]:
    """Worker counts an SDK job with ``logical`` logical ranks can run on within low..high: the
    divisors of ``logical`` (each worker hosts the same number of logical ranks)."""
    return tuple(n for n in range(max(1, low), high + 1) if logical % n == 0)
