"""The fleet workload generator: seeded, Philly's shapes, arrivals at the offered load."""

from __future__ import annotations

import pytest
from builders import fleet  # type: ignore[import-not-found]

from stint.sim.fleet_workload import generate, philly_shapes


def test_seeded_and_at_the_offered_load() -> None:
    fl = fleet(("a", "r0", 16), ("b", "r1", 16))
    jobs = generate(fl, 5000, 0.8, seed=3)
    assert generate(fl, 5000, 0.8, seed=3) == jobs
    assert generate(fl, 5000, 0.8, seed=4) != jobs
    gpus, dur = philly_shapes(128)
    assert all(j.gpus <= 128 for j in jobs)
    rate = (len(jobs) - 1) / jobs[-1].spec.arrival_s
    offered = rate * float((gpus * dur).mean()) / fl.total_gpus
    assert offered == pytest.approx(0.8, rel=0.06)
    shares = {t: sum(j.spec.tier.value == t for j in jobs) / len(jobs) for t in ("premium", "standard", "basic")}
    assert shares == pytest.approx({"premium": 0.1, "standard": 0.6, "basic": 0.3}, abs=0.03)
    assert {j.home_region for j in jobs} == {"r0", "r1"}
    assert all(fl.clusters[j.data_cluster].region == j.home_region for j in jobs)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="positive"):
        generate(fleet(("a", "r0", 1)), 0, 0.8)


@pytest.mark.slow
def test_a_warm_start_adds_the_jobs_running_at_time_zero_in_the_steady_state() -> None:
    fl = fleet(*((f"c{i}", f"r{i % 2}", 125) for i in range(4)))  # 4,000 GPUs
    cold = generate(fl, 3000, 0.8, seed=5)
    warm = generate(fl, 3000, 0.8, seed=5, warm=True)
    head = [j for j in warm if j.warmup]
    assert warm[len(head):] == cold and not any(j.warmup for j in cold)  # the measured jobs unchanged
    assert head and all(j.spec.arrival_s == 0.0 and j.job_id.startswith("w") for j in head)
    _, dur = philly_shapes(1000)
    rate = (len(cold) - 1) / cold[-1].spec.arrival_s
    assert len(head) == pytest.approx(rate * float(dur.mean()), rel=0.1)  # Poisson(rate x E[dur])
    # the GPUs they hold: rate x E[GPUs x dur] in expectation, the offered load's share of the fleet
    assert sum(j.gpus for j in head) / fl.total_gpus == pytest.approx(0.8, rel=0.25)
    assert all(0 < j.spec.work <= float(dur.max()) for j in head)
