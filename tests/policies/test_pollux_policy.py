"""The Pollux baseline: hand-computed splits on one node, the adaptive batch, workload 6."""

import pytest
from builders import elastic  # type: ignore[import-not-found]

from stint.model import Allocation, Cluster
from stint.perf.profile import ProfileModel
from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.policies.base import ClusterView, JobStatus
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator
from stint.sim.runner import perf_for
from stint.sim.traces import load


class ScalesOrNot:
    """Job "A" runs n units/s on n GPUs; any other job 1 unit/s however many it holds."""

    def rate(self, spec, allocation):
        n = allocation.num_workers
        return float(n) if spec.job_id == "A" else float(n > 0)


def _run(jobs, perf, **params):
    sim = Simulator(Cluster.uniform(1, 4), jobs, make("pollux", **params), perf, CostModel.free())
    return {r.job_id: r for r in sim.run().records}


def test_identical_jobs_split_the_node_evenly():
    # Amdahl with serial fraction 0.1: 1 GPU -> 1, 2 -> 1.818, 3 -> 2.5 units/s. Fair share 2
    # each; with p = -1 the fitness -1/s_A - 1/s_B is best at 2 + 2: both run 100 / 1.818 = 55 s.
    r = _run([elastic("A", 0, 100), elastic("B", 0, 100)], ScalingModel(serial=0.1))
    assert r["A"].finish_s == pytest.approx(55.0) and r["B"].finish_s == pytest.approx(55.0)


def test_spare_gpus_go_where_they_raise_goodput():
    # B gains nothing beyond one GPU, so A gets the other three: A 300 / 3 = 100 s, B 100 s.
    r = _run([elastic("A", 0, 300), elastic("B", 0, 100)], ScalesOrNot())
    assert r["A"].finish_s == pytest.approx(100.0) and r["B"].finish_s == pytest.approx(100.0)


def test_adaptive_jobs_pick_larger_batches_on_more_gpus_and_never_run_slower():
    adaptive, fixed = ProfileModel(progress=True, adaptive_batch=True), ProfileModel(progress=True)
    spec = next(j for j in load("pollux:6").jobs if j.application == "cifar10")
    assert adaptive.best_batch("cifar10", (1,)) < adaptive.best_batch("cifar10", (4, 4, 4, 4))
    for nodes in ({0: 1}, {0: 4}, {0: 4, 1: 4}, {0: 4, 1: 4, 2: 4, 3: 4}):
        alloc = Allocation.of(nodes)
        assert adaptive.rate(spec, alloc) >= fixed.rate(spec, alloc)
    with pytest.raises(ValueError, match="progress=True"):
        ProfileModel(adaptive_batch=True)


@pytest.mark.slow
def test_workload_6_within_fifteen_percent_of_pollux():
    trace = load("pollux:6")
    perf, batch = perf_for(trace, "pollux", "auto")
    assert batch == "adaptive"
    s = Simulator(Cluster.uniform(16, 4), trace.jobs, make("pollux"), perf, CostModel.pollux()).run().summary()
    assert s["avg_jct_s"] == pytest.approx(2446.0, rel=0.15)


def test_a_plain_snapshot_as_the_control_plane_passes_it():
    jobs = [JobStatus(spec=elastic(j, 0, 100)) for j in "AB"]
    view = ClusterView(now=0.0, cluster=Cluster.uniform(1, 4), jobs=jobs, free_gpus=[4], perf=ScalingModel(serial=0.1))
    plan = make("pollux").plan(view)
    assert {j: a.num_workers for j, a in plan.allocations.items()} == {"A": 2, "B": 2}
