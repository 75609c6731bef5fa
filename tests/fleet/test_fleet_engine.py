"""The fleet engine: one cluster is exactly ``stint sim``; moves and failures do what the guide says."""

from __future__ import annotations

import pytest

from stint.model.fleet import Fleet, FleetFailure, draw_sizes
from stint.perf.scaling import ScalingModel
from stint.policies.fleet.registry import make_global
from stint.policies.registry import make
from stint.sim.engine import Simulator
from stint.sim.fleet import FleetSimulator
from stint.sim.traces import Filters, load
from tests.fleet.fleet_helpers import fleet, job


@pytest.mark.parametrize("policy", ["fifo", "tiresias"])
@pytest.mark.parametrize("scheduler", ["static", "least-loaded", "gain"])
def test_one_cluster_fleet_gives_the_records_of_stint_sim(policy: str, scheduler: str) -> None:
    trace = load("philly", filters=Filters(limit=150))
    from stint.model.cluster import Cluster

    cluster = Cluster.uniform(8, 8)
    alone = Simulator(cluster, trace.jobs, make(policy), trace.perf).run()
    one = Fleet.single(cluster)
    res = FleetSimulator(one, draw_sizes(one, trace.jobs, 0), make_global(scheduler),
                         lambda: make(policy), trace.perf).run()
    assert res.clusters[0].records == alone.records
    assert res.clusters[0].busy_gpu_s == alone.busy_gpu_s
    assert len(res.records) == len(trace.jobs)
