"""The parameter-server job model of OASiS (Bao et al., INFOCOM'18, §III; summary §1).

A job trains asynchronously on ``N_i`` data chunks of ``M_i`` mini-batches each, for ``E_i`` epochs.
One mini-batch takes ``τ_i + 2 e_i / b_i`` (compute, then push and pull ``e_i`` of gradients at the
worker's bandwidth ``b_i``), so the job needs ``E_i N_i M_i (τ_i + 2 e_i / b_i)`` worker-seconds in
all, with at most ``N_i`` workers at once (constraint 3) and enough parameter servers that they are
never the bottleneck: ``b_i · workers <= B_i · PSs`` (constraint 6) and ``PSs <= workers`` (7).

Units (our calibration of the paper's ranges, see docs/oasis.md "open point 1"): ``τ_i`` in
seconds, ``e_i`` in MB, ``b_i``/``B_i`` in Gbit/s (``worker_demand.net_gbps``/``ps_demand.net_gbps``).
``JobSpec.work`` is in worker-seconds and ``PSPerfModel.rate`` is in effective workers, so a job
with ``y`` workers and enough PSs progresses ``y`` worker-seconds per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stint.model.allocation import Allocation
from stint.model.job import JobSpec
from stint.model.resources import Resources
from stint.model.utility import ConstantUtility, Utility


def minibatch_time_s(tau_s: float, grad_mb: float, worker_gbps: float) -> float:
    """Time per mini-batch ``τ + 2e/b`` in seconds (MB -> Mbit: x8; Gbit/s -> Mbit/s: x1000)."""
    return tau_s + 2.0 * grad_mb * 8.0 / (worker_gbps * 1000.0)


@dataclass(frozen=True, slots=True)
class PSJobSpec(JobSpec):
    """A ``JobSpec`` carrying the paper's job parameters. Build it with :func:`ps_job`.

    ``chunks`` = N_i (also ``max_workers``), ``minibatches`` = M_i, ``epochs`` = E_i,
    ``tau_s`` = τ_i, ``grad_mb`` = e_i. ``work`` must equal ``E N M (τ + 2e/b)`` worker-seconds.
    """

    chunks: int = 1
    minibatches: int = 1
    epochs: int = 1
    tau_s: float = 0.0
    grad_mb: float = 0.0

    def __post_init__(self) -> None:
        JobSpec.__post_init__(self)
        for name in ("chunks", "minibatches", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"job {self.job_id}: {name} must be >= 1 (got {getattr(self, name)})")
        if self.worker_demand.net_gbps <= 0:
            raise ValueError(f"job {self.job_id}: worker bandwidth b_i must be positive")
        if self.ps_demand is None or self.ps_demand.net_gbps <= 0:
            raise ValueError(f"job {self.job_id}: a PS job needs ps_demand with positive B_i")
        if self.worker_demand.net_gbps > self.ps_demand.net_gbps:
            raise ValueError(
                f"job {self.job_id}: b_i={self.worker_demand.net_gbps} > B_i={self.ps_demand.net_gbps} "
                "would need more PSs than workers, violating constraints (6)-(7)"
            )
        if self.max_workers != self.chunks:
            raise ValueError(f"job {self.job_id}: max_workers must equal chunks N_i={self.chunks}")
        expected = self.epochs * self.chunks * self.minibatches * self.minibatch_s
        if abs(self.work - expected) > 1e-6 * expected:
            raise ValueError(f"job {self.job_id}: work={self.work} but E N M (τ+2e/b)={expected}")

    @property
    def minibatch_s(self) -> float:
        return minibatch_time_s(self.tau_s, self.grad_mb, self.worker_demand.net_gbps)

    @property
    def ps_per_worker(self) -> float:
        """b_i / B_i: PSs needed per worker so that (6) holds."""
        assert self.ps_demand is not None
        return self.worker_demand.net_gbps / self.ps_demand.net_gbps

    def min_duration_s(self) -> float:
        """``E M (τ + 2e/b)``: the run time with N_i workers in every slot."""
        return self.epochs * self.minibatches * self.minibatch_s


def ps_job(
    job_id: str,
    arrival_s: float,
    *,
    chunks: int,
    minibatches: int,
    epochs: int,
    tau_s: float,
    grad_mb: float,
    worker_demand: Resources,
    ps_demand: Resources,
    utility: Utility | None = None,
    requested_workers: int | None = None,
    priority: float = 1.0,
    application: str = "ps",
) -> PSJobSpec:
    """Build a :class:`PSJobSpec`, computing ``work`` from the model.

    ``requested_workers`` is the fixed count the paper's FIFO/RRH baselines use (default N_i).
    """
    mb = minibatch_time_s(tau_s, grad_mb, worker_demand.net_gbps)
    req = chunks if requested_workers is None else max(1, min(requested_workers, chunks))
    return PSJobSpec(
        job_id=job_id,
        arrival_s=arrival_s,
        work=epochs * chunks * minibatches * mb,
        requested_workers=req,
        min_workers=1,
        max_workers=chunks,
        worker_demand=worker_demand,
        ps_demand=ps_demand,
        utility=utility if utility is not None else ConstantUtility(),
        priority=priority,
        application=application,
        chunks=chunks,
        minibatches=minibatches,
        epochs=epochs,
        tau_s=tau_s,
        grad_mb=grad_mb,
    )


def ps_needed(spec: JobSpec, workers: int) -> int:
    """Fewest PSs for ``workers`` workers under (6) ``b·y <= B·z`` and (7) ``z <= y``:
    ``ceil(y b/B)``, so none when a worker uses no bandwidth; 0 for all-reduce jobs. (When PSs
    have no bandwidth, (6) cannot hold: (7)'s most, ``y``.) The one copy of eq. (6): OASiS, its
    baselines and DRF all size PSs with it."""
    if spec.ps_demand is None or workers <= 0:
        return 0
    ratio = spec.worker_demand.net_gbps / spec.ps_demand.net_gbps if spec.ps_demand.net_gbps else 1.0
    return min(workers, math.ceil(workers * ratio - 1e-9))


def effective_workers(spec: JobSpec, workers: int, ps: int) -> float:
    """Workers that make progress: at most N_i (3), and at most ``z B/b`` when PSs bottleneck (6)."""
    y = float(min(workers, spec.max_workers))
    if spec.ps_demand is None or y <= 0:
        return max(y, 0.0)
    if ps <= 0:
        return 0.0
    return min(y, ps * spec.ps_demand.net_gbps / spec.worker_demand.net_gbps)


class PSPerfModel:
    """``PerfModel`` of the paper: rate in worker-seconds per second = effective workers."""

    def rate(self, spec: JobSpec, allocation: Allocation) -> float:
        return effective_workers(spec, allocation.num_workers, allocation.num_ps)
