"""Start estimates: estimated again as soon as one passes, shown as overdue (never a time in
the past) meanwhile, with a band around them; a running job's launch still to come counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from stint.model.job import JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.runtime.cli import _eta
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.tables import Attempt


def _two_jobs(store: Store, tmp_path: Path, true_s: float) -> tuple[Controller, ClockedExecutor, int]:
    """Job a (declared 100 s, really ``true_s``) runs on the only GPU; b waits for it."""
    store.epoch(0.0)
    store.create_token("admin", 0.0, admin=True)
    caller = Caller(1, "admin", True)
    ex = ClockedExecutor([1], {"1": JobSpec("1", 0.0, true_s), "2": JobSpec("2", 0.0, 5.0)},
                         ScalingModel())
    ctl = Controller(store, ex, make("fifo"), ControllerConfig(
        tmp_path / "jobs", forecast_policy=lambda: make("fifo"), forecast_s=1000.0))
    store.add_job(NewJob("a", ["true"], 1, 1, 1, "standard", 1.0, None, est_s=100.0), caller, 0.0)
    b = store.add_job(NewJob("b", ["true"], 1, 1, 1, "standard", 1.0, None, est_s=5.0), caller, 0.0)
    ctl.step(0.0)
    return ctl, ex, b.id


def test_a_passed_estimate_is_made_again_at_once(store: Store, tmp_path: Path) -> None:
    ctl, ex, b = _two_jobs(store, tmp_path, true_s=150.0)  # a runs longer than declared
    row = store.get_job(b)
    assert row is not None and row.est_start_at == pytest.approx(100.0)
    ex.now = 101.0
    ctl.step(101.0)  # nothing happened, and no forecast is due by time: but b's estimate passed
    row = store.get_job(b)
    assert row is not None and row.est_start_at is not None and row.est_start_at >= 101.0


def test_an_estimate_in_the_past_shows_as_overdue() -> None:
    row = {"state": "queued", "est_start_at": 90.0, "est_start_lo_at": 80.0,
           "est_start_hi_at": 120.0}
    assert _eta(row, 100.0) == "overdue, re-estimating"
    assert _eta({**row, "est_start_at": 130.0, "est_start_hi_at": 160.0}, 100.0) == \
        "in 30s (0s-1m00s)"


def test_the_band_brackets_the_estimate(store: Store, tmp_path: Path) -> None:
    _, _, b = _two_jobs(store, tmp_path, true_s=100.0)
    row = store.get_job(b)
    assert row is not None and row.est_start_lo_at is not None and row.est_start_hi_at is not None
    assert row.est_start_lo_at == pytest.approx(90.0)  # a 10 % shorter than declared
    assert row.est_start_lo_at <= row.est_start_at <= row.est_start_hi_at  # type: ignore[operator]
    assert row.est_start_hi_at == pytest.approx(110.0)


def test_measured_launch_costs_move_the_estimates(store: Store, tmp_path: Path) -> None:
    ctl, _, b = _two_jobs(store, tmp_path, true_s=100.0)
    with store.session() as s:  # one earlier attempt that took 7 s from launch to its first step
        s.add(Attempt(job_id=1, attempt=99, workers=1, resumed=False, launched_at=0.0,
                      first_step_at=7.0, first_step=0, ended_at=10.0, end_step=3,
                      outcome="succeeded"))
    ctl._costs_at = float("-inf")  # refit now
    ctl._forecast_at = float("-inf")
    ctl._forecast_stale = True
    ctl.forecast(0.0)
    row = store.get_job(b)
    # a, launched at 0 and not yet at its first step, has 7 s of launch left; b, after it, too
    assert row is not None and row.est_start_at == pytest.approx(107.0)
    assert row.est_finish_at == pytest.approx(107.0 + 7.0 + 5.0)
