"""The fleet engine: one cluster is exactly ``stint sim``; moves and failures do what the guide says."""

from __future__ import annotations

import pytest
from builders import fleet, fleet_job  # type: ignore[import-not-found]

from stint.model.fleet import Fleet, FleetFailure, FleetJob, draw_sizes
from stint.perf.scaling import ScalingModel
from stint.policies.fleet.base import link_gbps, move_cost_s, move_costs_s
from stint.policies.fleet.registry import make_global
from stint.policies.registry import make
from stint.sim.engine import Simulator
from stint.sim.fleet import FleetSimulator
from stint.sim.traces import Filters, load


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


def _run(fl: Fleet, jobs: list, scheduler: str, policy: str = "fifo", opts: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return FleetSimulator(fl, jobs, make_global(scheduler, opts), lambda: make(policy), ScalingModel()).run()


def _by_id(res):  # type: ignore[no-untyped-def]
    return {r.job_id: r for r in res.records}


def test_static_keeps_jobs_on_their_data_cluster_and_gain_spreads_them() -> None:
    fl = fleet(("a", "r0", 1), ("b", "r0", 1))
    jobs = [fleet_job("j1", 0.0, 1000.0), fleet_job("j2", 0.0, 1000.0)]
    static = _by_id(_run(fl, jobs, "static"))
    assert [static[j].cluster for j in ("j1", "j2")] == ["a", "a"]
    assert static["j2"].finish_s == 2000.0
    gain = _by_id(_run(fl, jobs, "gain"))
    assert {gain["j1"].cluster, gain["j2"].cluster} == {"a", "b"}
    assert gain["j2"].finish_s == 1000.0  # no data to copy, nothing to wait for


def test_gain_stays_when_the_copy_costs_more_than_the_wait() -> None:
    # 1000 GB of data over 10 Gbit/s is 800 s; waiting for j1 costs 100 s.
    fl = fleet(("a", "r0", 1), ("b", "r1", 1))
    jobs = [fleet_job("j1", 0.0, 100.0), fleet_job("j2", 0.0, 100.0, data_gb=1000.0)]
    gain = _by_id(_run(fl, jobs, "gain"))
    assert gain["j2"].cluster == "a" and gain["j2"].finish_s == 200.0


def test_a_failed_cluster_loses_work_since_the_last_checkpoint_and_resumes_elsewhere() -> None:
    down = FleetFailure("cluster", "a", 4000.0, 9000.0)
    fl = fleet(("a", "r0", 1), ("b", "r0", 1), failures=(down,))
    res = _run(fl, [fleet_job("j1", 0.0, 10000.0, ckpt_gb=10.0)], "gain")
    r = _by_id(res)["j1"]
    # checkpoints at 1800 and 3600: 400 s lost; copy 10 GB at 40 Gbit/s = 2 s, restart 30 s
    assert r.cluster == "b" and r.cluster_moves == 1 and r.region_moves == 0
    assert r.lost_gpu_s == pytest.approx(400.0 * 8)
    assert r.ckpt_gb_moved == 10.0
    assert r.finish_s == pytest.approx(4000.0 + 32.0 + 10000.0 - 3600.0)
    assert res.summary()["max_lost_s_per_failure"] <= fl.checkpoint.interval_s


def test_static_holds_a_downed_regions_jobs_until_it_is_back() -> None:
    down = FleetFailure("region", "r0", 100.0, 5000.0)
    fl = fleet(("a", "r0", 1), ("b", "r1", 1), failures=(down,))
    jobs = [fleet_job("j1", 0.0, 1000.0), fleet_job("j2", 200.0, 1000.0)]
    static = _by_id(_run(fl, jobs, "static"))
    # no checkpoint yet at 100 s: all 100 s are lost and it starts again from nothing; it has
    # run before (its first start carries over), so a's engine resumes it: 30 s of restart
    assert static["j1"].cluster == "a" and static["j1"].finish_s == pytest.approx(5000.0 + 30.0 + 1000.0)
    assert static["j1"].lost_gpu_s == pytest.approx(100.0 * 8)
    assert static["j2"].finish_s > 5000.0
    gain = _by_id(_run(fl, jobs, "gain"))
    assert gain["j1"].cluster == "b" and gain["j1"].region_moves == 1
    assert gain["j2"].cluster == "b" and gain["j2"].finish_s < 5000.0


def test_a_cut_region_keeps_running_but_takes_nothing_new() -> None:
    cut = FleetFailure("network", "r0", 10.0, 5000.0)
    fl = fleet(("a", "r0", 1), ("b", "r1", 1), failures=(cut,))
    res = _by_id(_run(fl, [fleet_job("j1", 0.0, 1000.0), fleet_job("j2", 20.0, 100.0)], "static"))
    assert res["j1"].finish_s == 1000.0 and res["j1"].lost_gpu_s == 0.0  # ran through the cut
    assert res["j2"].finish_s == pytest.approx(5100.0)  # held until the region is reachable


def test_gain_moves_a_waiting_job_when_another_cluster_frees() -> None:
    down = FleetFailure("cluster", "b", 0.0, 1000.0)
    fl = fleet(("a", "r0", 1), ("b", "r0", 1), failures=(down,))
    jobs = [fleet_job("j1", 0.0, 10000.0), fleet_job("j2", 1.0, 10000.0)]
    res = _by_id(_run(fl, jobs, "gain", opts=("period_s=300",)))
    assert res["j2"].cluster == "b" and res["j2"].cluster_moves == 1
    assert res["j2"].finish_s == pytest.approx(1200.0 + 10000.0)  # the first period after b is back


@pytest.mark.parametrize("scheduler", ["gain", "static", "least-loaded"])
def test_a_job_larger_than_every_cluster_is_never_placed(scheduler: str) -> None:
    fl = fleet(("a", "r0", 1), ("b", "r1", 1))
    res = _by_id(_run(fl, [fleet_job("big", 0.0, 100.0, gpus=16), fleet_job("j", 0.0, 100.0)], scheduler))
    assert res["big"].rejected == "never placed" and res["big"].attainment == 0.0
    assert res["j"].finish_s == 100.0


def test_a_node_failure_is_the_clusters_own() -> None:
    # the job holds node 0; it is preempted there (no work lost) and resumes on node 1 (30 s)
    fl = fleet(("a", "r0", 2), failures=(FleetFailure("node", "a/0", 100.0, 200.0),))
    r = _by_id(_run(fl, [fleet_job("j", 0.0, 1000.0)], "gain"))["j"]
    assert r.cluster == "a" and r.lost_gpu_s == 0.0 and r.cluster_moves == 0
    assert r.finish_s == pytest.approx(1030.0)


def test_utilization_is_over_the_gpus_up_and_warmup_jobs_count_only_there() -> None:
    # a (8 GPUs) is down for half of the window [0, 1000]: 4,000 of its 8,000 GPU-seconds
    down = FleetFailure("cluster", "a", 0.0, 500.0)
    fl = fleet(("a", "r0", 1), ("b", "r0", 1), failures=(down,))
    warm = FleetJob(fleet_job("w", 0.0, 5000.0).spec, "r0", 1, 10.0, 0.0, warmup=True)
    jobs = [warm, fleet_job("j1", 500.0, 10.0), fleet_job("last", 1000.0, 10.0)]
    s = _run(fl, jobs, "static").summary()
    assert s["jobs"] == 2 and s["warmup_jobs"] == 1
    used = 8 * 1000.0 + 8 * 10.0  # w on b for the window; j1 on a from 500 to 510
    assert s["gpu_utilization"] == pytest.approx(used / (16 * 1000.0 - 8 * 500.0))
    assert s["gpu_utilization_installed"] == pytest.approx(used / (16 * 1000.0))
    assert s["per_cluster"]["a"]["utilization"] == pytest.approx(80.0 / 4000.0)


def test_down_gpu_seconds_count_overlapping_failures_once() -> None:
    fails = (FleetFailure("cluster", "a", 100.0, 300.0), FleetFailure("region", "r0", 200.0, 400.0),
             FleetFailure("node", "b/0", 0.0, 1000.0), FleetFailure("node", "a/1", 350.0, 500.0),
             FleetFailure("network", "r1", 0.0, 1000.0))
    fl = fleet(("a", "r0", 2), ("b", "r1", 2), failures=fails)
    # a: all 16 GPUs down over [100, 400], then node 1 to 500 (8 GPUs x 100 s); b: node 0 over
    # [0, 1000] clipped to the window [0, 600]; the cut network takes nothing down
    assert fl.down_gpu_s(0.0, 600.0) == [16 * 300.0 + 8 * 100.0, 8 * 600.0]


def test_the_costs_to_every_cluster_are_move_cost_s_to_each() -> None:
    f = fleet(("a", "r0", 2), ("b", "r0", 2), ("c", "r1", 2), ("d", "r2", 1))
    gbps = link_gbps(f)
    for data in range(4):
        job = fleet_job("j", 0.0, 100.0, data=data, ckpt_gb=3.7, data_gb=123.4)
        for src in (None, 0, 1, 2, 3):
            for ckpt in (False, True):
                assert move_costs_s(f, gbps, job, src, ckpt) == [move_cost_s(f, job, src, dst, ckpt)
                                                                 for dst in range(4)]
