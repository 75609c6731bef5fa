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
