"""Builders for the fleet tests."""

from __future__ import annotations

from stint.model.fleet import CheckpointRule, Fleet, FleetCluster, FleetFailure, FleetJob, Links
from stint.model.job import JobSpec, Tier


def fleet(*clusters: tuple[str, str, int], failures: tuple[FleetFailure, ...] = (),
          interval_s: float = 1800.0) -> Fleet:
    """Clusters as (name, region, nodes of 8 GPUs)."""
    return Fleet(tuple(FleetCluster(n, r, k, 8) for n, r, k in clusters),
                 Links(cluster_gbps=100.0, region_gbps=40.0, wan_gbps=10.0),
                 CheckpointRule(interval_s=interval_s, restart_s=30.0), failures)


def job(job_id: str, arrival_s: float, work: float, gpus: int = 8, data: int = 0, region: str = "r0",
        tier: Tier = Tier.STANDARD, ckpt_gb: float = 10.0, data_gb: float = 0.0) -> FleetJob:
    spec = JobSpec(job_id, arrival_s, work, gpus, gpus, gpus, tier=tier, duration_s=work)
    return FleetJob(spec, region, data, ckpt_gb, data_gb)
