"""Philly-shaped traces (``traces.philly_shaped``) and load scaling (``traces.scale_load``)."""

from __future__ import annotations

import pytest

from stint.sim.trace_fields import TraceError
from stint.sim.traces import Filters, load, philly_shaped, scale_load


@pytest.fixture(scope="module")
def philly_rows() -> set[tuple[int, float, str]]:
    return {(j.requested_workers, j.work, j.vc) for j in load("philly").jobs}


@pytest.mark.slow
def test_jobs_are_rows_of_the_philly_trace_and_seeded(philly_rows: set[tuple[int, float, str]]) -> None:
    a, b, c = philly_shaped(3000, seed=1), philly_shaped(3000, seed=1), philly_shaped(3000, seed=2)
    assert a.jobs == b.jobs and a.jobs != c.jobs
    assert len(a.jobs) == 3000 and len({j.job_id for j in a.jobs}) == 3000
    assert all((j.requested_workers, j.work, j.vc) in philly_rows for j in a.jobs)
    assert all(j.min_workers == j.requested_workers == j.max_workers for j in a.jobs)
    assert [j.arrival_s for j in a.jobs] == sorted(j.arrival_s for j in a.jobs)
    assert a.format == "philly" and a.job_model == "recorded-duration"
    # a spread of sizes, as in the source: not all one-GPU jobs, not all the same duration
    assert len({j.requested_workers for j in a.jobs}) >= 4 and len({j.work for j in a.jobs}) > 1000


@pytest.mark.slow
def test_the_arrival_rate_scales_with_the_cluster_and_the_load() -> None:
    base = philly_shaped(2000, gpus=512, seed=5)
    big = philly_shaped(2000, gpus=4096, seed=5)
    busy = philly_shaped(2000, gpus=512, seed=5, load_factor=2.0)
    for x, y, z in zip(base.jobs, big.jobs, busy.jobs, strict=True):
        assert y.arrival_s == pytest.approx(x.arrival_s / 8)
        assert z.arrival_s == pytest.approx(x.arrival_s / 2)
        assert (x.work, x.requested_workers) == (y.work, y.requested_workers)
    # the mean gap is the Philly trace's own, for the reference cluster
    philly = load("philly").jobs
    mean_gap = philly[-1].arrival_s / (len(philly) - 1)
    assert base.jobs[-1].arrival_s / 1999 == pytest.approx(mean_gap, rel=0.25)


def test_a_spec_string_loads_a_generated_trace_with_filters() -> None:
    t = load("philly-shaped:500:1024", seed=3, filters=Filters(limit=200))
    assert t.name == "philly-shaped:500:1024" and len(t.jobs) == 200
    assert [j.job_id for j in t.jobs] == [j.job_id for j in philly_shaped(500, 1024, seed=3).jobs[:200]]
    for bad in ("philly-shaped:", "philly-shaped:x", "philly-shaped:10:0", "philly-shaped:1:2:3"):
        with pytest.raises(TraceError, match="philly-shaped"):
            load(bad)


def test_scale_load_divides_arrival_times() -> None:
    t = load("pollux:6")
    doubled = scale_load(t, 2.0)
    assert [j.arrival_s for j in doubled.jobs] == [j.arrival_s / 2.0 for j in t.jobs]
    assert [j.work for j in doubled.jobs] == [j.work for j in t.jobs]
    assert scale_load(t, 1.0) is t
    with pytest.raises(TraceError, match="load must be positive"):
        scale_load(t, 0.0)
