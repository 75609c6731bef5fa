"""The fleet workload generator: seeded, Philly's shapes, arrivals at the offered load."""

from __future__ import annotations

import pytest
from fleet_helpers import fleet

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
