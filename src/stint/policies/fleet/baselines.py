"""The baselines: ``static`` (by the submitter's region) and ``least-loaded``. Neither moves a
waiting job; both place the jobs of a failed cluster again like arrivals."""

from __future__ import annotations

from dataclasses import dataclass

from stint.policies.fleet.base import ClusterState, FleetView, GlobalPlan, fits


@dataclass
class Static:
    """The job's data cluster, else the least backlogged usable cluster of its submitter's
    region; if none is usable (the region is down), the job is held until one is."""

    name: str = "static"
    period_s: float | None = None

    def plan(self, view: FleetView) -> GlobalPlan:
        plan = GlobalPlan()
        fleet = view.fleet
        usable: dict[str, list[ClusterState]] = {}  # per region (a job held while its region is down costs O(1))
        for c in view.clusters:
            if c.available:
                usable.setdefault(fleet.clusters[c.index].region, []).append(c)
        for p in view.pending:
            job = p.job
            home = view.clusters[job.data_cluster]
            if fits(fleet, home, job):
                plan.place[job.job_id] = home.index
                continue
            region = [c for c in usable.get(job.home_region, ()) if fits(fleet, c, job)]
            if region:
                plan.place[job.job_id] = min(region, key=lambda c: (c.expected_wait_s(job.gpus), c.index)).index
        return plan


@dataclass
class LeastLoaded:
    """The usable cluster with the fewest GPUs asked per GPU up, wherever it is."""

    name: str = "least-loaded"
    period_s: float | None = None

    def plan(self, view: FleetView) -> GlobalPlan:
        plan = GlobalPlan()
        assigned = {c.index: c.assigned_gpus for c in view.clusters}
        for p in view.pending:
            job = p.job
            ok = [c for c in view.clusters if fits(view.fleet, c, job)]
            if not ok:
                continue

            def load(c: ClusterState) -> tuple[float, int]:
                return (assigned[c.index] / c.gpus, c.index)

            best = min(ok, key=load)
            assigned[best.index] += job.gpus
            plan.place[job.job_id] = best.index
        return plan
