"""The forecast: the simulator run forward from a live state, with the same kind of policy."""

from __future__ import annotations

import pytest

from stint.model import Allocation, Cluster, JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.policies.base import JobStatus, Phase
from stint.sim.forecast import forecast


def test_forecast_from_a_state_gives_each_job_its_start_and_finish():
    # One node of 4 GPUs at t=100. A runs on 2 GPUs with 50 of its 100 s done; B (4 GPUs, 30 s)
    # waits; C (1 GPU, 10 s) is behind B (FIFO: no backfill); D was preempted with 5 of 20 s done.
    a = JobStatus(JobSpec("A", 0.0, 100.0, 2, 2, 2), Phase.RUNNING, Allocation.of({0: 2}),
                  work_done=40.0, first_start_s=50.0, rate=1.0, as_of_s=90.0)
    b = JobStatus(JobSpec("B", 60.0, 30.0, 4, 4, 4))
    c = JobStatus(JobSpec("C", 70.0, 10.0, 1, 1, 1))
    d = JobStatus(JobSpec("D", 80.0, 20.0, 1, 1, 1), Phase.PAUSED, work_done=5.0, first_start_s=81.0)
    est = forecast(Cluster.uniform(1, 4), [a, b, c, d], make("fifo"), ScalingModel(), 100.0)
    # A holds its GPUs: it starts "now" and finishes at 100 + 50. FIFO by arrival (B, C, D): B
    # needs all 4 GPUs, so after A, 150-180; then C and D together: C 180-190, D 180-195.
    assert est["A"].start_s == 100.0 and est["A"].finish_s == pytest.approx(150.0)
    assert (est["B"].start_s, est["B"].finish_s) == (pytest.approx(150.0), pytest.approx(180.0))
    assert est["C"].start_s == pytest.approx(180.0) and est["C"].finish_s == pytest.approx(190.0)
    assert est["D"].start_s == pytest.approx(180.0) and est["D"].finish_s == pytest.approx(195.0)
    # the live statuses are left as they were
    assert a.work_done == 40.0 and a.as_of_s == 90.0 and b.allocation == Allocation()
