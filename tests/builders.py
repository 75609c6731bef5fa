"""The test builders every test file shares: jobs, a simulated run, and polling for a condition.

Test files import them as ``from builders import ...`` (``tests/`` is on the path: it holds the
root ``conftest.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from stint.model import Cluster, JobSpec, Resources, Tier
from stint.model.fleet import CheckpointRule, Fleet, FleetCluster, FleetFailure, FleetJob, Links
from stint.perf.model import PerfModel
from stint.perf.scaling import ScalingModel
from stint.policies.base import Policy
from stint.policies.knowledge import Knowledge
from stint.sim.costs import CostModel
from stint.sim.engine import NodeFailure, Simulator
from stint.sim.metrics import JobRecord, RunResult


def rigid(jid: str, arrival: float, seconds: float, gpus: int = 1, *, user: str = "u",
          est: float | None = None, tier: Tier = Tier.STANDARD, cpu: float = 0.0,
          declared: bool = False) -> JobSpec:
    """A job of ``gpus`` workers that runs ``seconds`` at that size (its work and its recorded
    duration); ``est`` is what its user declares (``declared``: exactly its length)."""
    demand = Resources(gpu=1, cpu=cpu) if cpu else Resources(gpu=1)
    return JobSpec(jid, float(arrival), float(seconds), gpus, gpus, gpus, worker_demand=demand,
                   user=user, tier=tier, duration_s=float(seconds),
                   est_s=float(seconds) if declared else est)


def elastic(jid: str, arrival: float, work: float, lo: int = 1, hi: int = 4, *,
            start: int | None = None, est: float | None = None) -> JobSpec:
    """A job that runs on ``lo``..``hi`` workers, asking for ``start`` (default ``lo``)."""
    return JobSpec(jid, float(arrival), float(work), start or lo, lo, hi, est_s=est)


def simulate_run(policy: Policy, jobs: Sequence[JobSpec], cluster: Cluster | None = None, *,
                 perf: PerfModel | None = None, costs: CostModel | None = None,
                 failures: Sequence[NodeFailure] = (), knowledge: Knowledge | None = None
                 ) -> RunResult:
    """The simulator's whole run of ``jobs`` (default: one node of 4 GPUs, linear scaling, free
    starts and stops, no node failures, declared knowledge)."""
    return Simulator(cluster or Cluster.uniform(1, 4), list(jobs), policy, perf or ScalingModel(),
                     costs or CostModel.free(), list(failures),
                     knowledge=knowledge or Knowledge()).run()


def records(policy: Policy, jobs: Sequence[JobSpec], cluster: Cluster | None = None, *,
            perf: PerfModel | None = None, costs: CostModel | None = None,
            failures: Sequence[NodeFailure] = (), knowledge: Knowledge | None = None
            ) -> dict[str, JobRecord]:
    """Each job's record from ``simulate_run``, by id."""
    res = simulate_run(policy, jobs, cluster, perf=perf, costs=costs, failures=failures,
                       knowledge=knowledge)
    return {r.job_id: r for r in res.records}


def fleet(*clusters: tuple[str, str, int], failures: tuple[FleetFailure, ...] = (),
          interval_s: float = 1800.0) -> Fleet:
    """A fleet of clusters given as (name, region, nodes of 8 GPUs), with fixed links."""
    return Fleet(tuple(FleetCluster(n, r, k, 8) for n, r, k in clusters),
                 Links(cluster_gbps=100.0, region_gbps=40.0, wan_gbps=10.0),
                 CheckpointRule(interval_s=interval_s, restart_s=30.0), failures)


def fleet_job(job_id: str, arrival_s: float, work: float, gpus: int = 8, data: int = 0,
              region: str = "r0", tier: Tier = Tier.STANDARD, ckpt_gb: float = 10.0,
              data_gb: float = 0.0) -> FleetJob:
    """A rigid fleet job submitted in ``region`` whose data lives in cluster ``data``."""
    spec = JobSpec(job_id, arrival_s, work, gpus, gpus, gpus, tier=tier, duration_s=work)
    return FleetJob(spec, region, data, ckpt_gb, data_gb)


def wait_for(cond: Callable[[], object], timeout: float = 30.0, what: str = "condition",
             tick: Callable[[], object] | None = None, every: float = 0.05) -> object:
    """Poll ``cond`` every ``every`` seconds (calling ``tick`` between polls) until it is truthy
    and return its value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick is not None:
            tick()
        value = cond()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
