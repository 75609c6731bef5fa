"""Optimus as Pollux's simulator runs it: arrival-order admission at the smallest size, growth by
the true step time, stopping at the first non-positive gain (``policies/optimus.py``)."""

import pytest
from builders import elastic  # type: ignore[import-not-found]

from stint.model import Allocation, Cluster, JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.policies.knowledge import Knowledge, Mode
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator


class Table:
    """Work units/s by worker count (the same for every job): a measured, bumpy profile."""

    def __init__(self, rates: dict[int, float]) -> None:
        self.rates = rates

    def rate(self, spec: JobSpec, allocation: Allocation) -> float:
        return self.rates.get(allocation.num_workers, 0.0)


def run(jobs, perf, gpus, mode=Mode.DECLARED):
    sizes: dict[str, list[int]] = {}

    def record(t, a):
        sizes.setdefault(a.job_id, []).append(a.after.num_workers)

    res = Simulator(Cluster.uniform(1, gpus), jobs, make("optimus"), perf, CostModel.free(),
                    on_action=record, knowledge=Knowledge(mode)).run()
    return {r.job_id: r for r in res.records}, sizes


def test_waiting_jobs_are_admitted_in_arrival_order():
    # One GPU: A (0-100) runs; B (50 s) arrives at 1, C (10 s) at 2. At 100 the earlier B
    # starts (shortest-remaining-first would pick C), 100-150; C 150-160.
    rigid = [JobSpec("A", 0.0, 100.0, est_s=100.0), JobSpec("B", 1.0, 50.0, est_s=50.0),
             JobSpec("C", 2.0, 10.0, est_s=10.0)]
    r, _ = run(rigid, ScalingModel(), 1)
    assert (r["B"].first_start_s, r["C"].first_start_s) == (100, 150)


def test_a_job_grows_by_the_true_step_time_and_stops_at_the_first_non_positive_gain():
    # Alone on 4 GPUs: 1 -> 2 workers gains, 2 -> 3 loses (a bump in the measured profile), so
    # it stays on 2 even though 4 would be fastest (a smooth fitted model would grow it to 4).
    perf = Table({1: 1.0, 2: 1.9, 3: 1.8, 4: 3.0})
    r, sizes = run([elastic("A", 0, 190, 1, 4, est=190)], perf, 4)
    assert sizes["A"] == [2] and r["A"].jct_s == pytest.approx(100)
    r, sizes = run([elastic("A", 0, 300, 1, 4, est=300)], Table({1: 1.0, 2: 1.9, 3: 2.7, 4: 3.0}), 4)
    assert sizes["A"] == [4]  # every step gains: it takes all four


def test_the_spare_gpu_goes_to_the_job_known_to_have_more_left():
    # Three GPUs, A and B elastic up to 2: each gets one, the third goes to the larger gain,
    # rem x (1/1 - 1/1.5) per GPU: the job with more known remaining work. A is declared
    # 1000 s (its true work 100), B 500 s (true): declared, A grows; oracle, B does.
    perf = Table({1: 1.0, 2: 1.5})
    jobs = [elastic("A", 0, 100, 1, 2, est=1000), elastic("B", 0, 500, 1, 2, est=500)]
    _, sizes = run(jobs, perf, 3)
    assert sizes["A"][0] == 2 and sizes["B"][0] == 1
    _, sizes = run(jobs, perf, 3, Mode.ORACLE)
    assert sizes["A"][0] == 1 and sizes["B"][0] == 2
