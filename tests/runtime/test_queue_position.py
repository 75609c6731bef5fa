"""Queue position: each waiting job's place in its policy's order (the real controller, a real
store, the clocked executor: no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.schemas import JobOut
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.view import spec_of


@pytest.mark.parametrize(("policy", "expected"), [
    ("fifo", {"long": 1, "short": 2, "mid": 3}),  # by arrival
    ("srtf", {"short": 1, "mid": 2, "long": 3}),  # by declared length
])
def test_queue_position_follows_the_policy_order(policy: str, expected: dict[str, int],
                                                 store: Store, tmp_path: Path) -> None:
    store.epoch(0.0)
    admin = Caller(0, "admin", True)
    store.create_token("admin", 0.0, admin=True)
    caller = Caller(1, "admin", True)
    jobs = [("busy", 2, 10.0), ("long", 2, 500.0), ("short", 1, 50.0), ("mid", 1, 100.0)]
    ids = {name: store.add_job(NewJob(name, ["true"], g, g, g, "standard", 1.0, None, est_s=est),
                               caller, 0.0).id for name, g, est in jobs[:1]}
    ex = ClockedExecutor([2], {}, ScalingModel())
    ctl = Controller(store, ex, make(policy), ControllerConfig(
        tmp_path / "jobs", forecast_policy=lambda: make(policy), forecast_s=0.0))
    ctl.step(0.0)  # "busy" takes both GPUs
    for name, g, est in jobs[1:]:
        ids[name] = store.add_job(NewJob(name, ["true"], g, g, g, "standard", 1.0, None,
                                         est_s=est), caller, 1.0).id
    ex.specs = {str(j.id): spec_of(j, "admin", 0.0) for j in store.list_jobs(admin)}
    ctl.step(1.0)
    rows = {j.name: j for j in store.list_jobs(admin)}
    assert rows["busy"].state == "running"
    out = {name: JobOut.of(row, "admin", ["node-0"]) for name, row in rows.items()}
    assert out["busy"].queue_position is None  # it runs
    assert {n: out[n].queue_position for n in expected} == expected
    assert all(out[n].est_start_at is not None for n in expected)
    # A running job's start and an ended job's estimates are history, not forecasts.
    assert out["busy"].est_start_at is None and out["busy"].est_finish_at is not None
    ended = rows["busy"]
    ended.state = "succeeded"
    done = JobOut.of(ended, "admin", ["node-0"])
    assert done.est_start_at is None and done.est_finish_at is None


def test_a_forecast_not_due_at_a_change_is_made_once_due(store: Store, tmp_path: Path) -> None:
    # The policy runs at a submission; the forecast, due only forecast_s after the last one,
    # must still come when nothing else happens (it did not: quiet steps skipped it).
    store.epoch(0.0)
    store.create_token("admin", 0.0, admin=True)
    caller = Caller(1, "admin", True)
    ex = ClockedExecutor([1], {}, ScalingModel())
    ctl = Controller(store, ex, make("fifo"), ControllerConfig(
        tmp_path / "jobs", forecast_policy=lambda: make("fifo"), forecast_s=10.0))
    first = store.add_job(NewJob("a", ["true"], 1, 1, 1, "standard", 1.0, None, est_s=100.0),
                          caller, 0.0)
    ex.specs = {str(first.id): spec_of(first, "admin", 0.0)}
    ctl.step(0.0)  # starts "a", forecasts
    second = store.add_job(NewJob("b", ["true"], 1, 1, 1, "standard", 1.0, None, est_s=5.0),
                           caller, 1.0)
    ctl.step(1.0)  # the policy sees "b"; no forecast yet (the last was 1 s ago)
    assert store.get_job(second.id).est_start_at is None  # type: ignore[union-attr]
    assert ctl.step(11.0).skipped  # nothing changed, but a forecast is due
    row = store.get_job(second.id)
    assert row is not None and row.est_start_at == pytest.approx(100.0)
    assert row.queue_position == 1
