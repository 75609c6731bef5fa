"""A running job whose SDK reports it at its last step (or past its loop) is left to end by itself: the policy's
preemption or resize, an operator's preempt and an operator's pin are not carried out, and the
policy's view marks it finishing. The real controller and store, the clocked executor whose
reports the test writes: no processes (tests/executor/test_sdk_end.py runs the real SDK)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.policies.base import JobStatus
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.view import spec_of, status_of


@dataclass
class Reporting(ClockedExecutor):
    """A clocked executor whose jobs' SDK reports (their status files) the test sets."""

    reports: dict[str, dict[str, Any]] = field(default_factory=dict)

    def status(self, job_id: str) -> Mapping[str, Any] | None:
        return self.reports.get(job_id)


def setup(store: Store, tmp_path: Path, policy: str = "srtf") -> tuple[Reporting, Controller, Caller]:
    store.epoch(0.0)
    store.create_token("admin", 0.0, admin=True)
    ex = Reporting([2], {}, ScalingModel())
    return ex, Controller(store, ex, make(policy), ControllerConfig(tmp_path / "jobs")), Caller(1, "admin", True)


def submit(store: Store, ex: Reporting, caller: Caller, at: float, est_s: float, gpus: int = 2,
           lo: int | None = None) -> int:
    job = store.add_job(NewJob("j", ["true"], gpus, lo or gpus, gpus, "standard", 1.0, None,
                               est_s=est_s), caller, at)
    ex.specs = {**ex.specs, str(job.id): spec_of(job, "admin", 0.0)}
    return job.id


def state(store: Store, job_id: int) -> str:
    row = store.get_job(job_id)
    assert row is not None
    return row.state


LAST = {"state": "running", "step": 99, "total_steps": 100}  # running its last step
BEFORE_LAST = {"state": "running", "step": 98, "total_steps": 100}
FINISHED = {"state": "finished", "step": 100, "total_steps": None}


@pytest.mark.parametrize(("report", "after"), [(LAST, "running"), (FINISHED, "running"),
                                               (BEFORE_LAST, "checkpointing"), (None, "checkpointing")])
def test_the_policy_does_not_preempt_a_job_at_its_last_step(
        store: Store, tmp_path: Path, report: dict[str, Any] | None, after: str) -> None:
    ex, ctl, caller = setup(store, tmp_path)
    big = submit(store, ex, caller, 0.0, 600.0)
    ctl.step(0.0)
    assert state(store, big) == "running"
    if report is not None:
        ex.reports[str(big)] = report
    submit(store, ex, caller, 5.0, 10.0)  # shorter: SRTF preempts the big job for it
    ex.now = 5.0
    done = ctl.step(5.0)
    assert state(store, big) == after
    refused = [r for r in done.refusals if "last step" in r]
    assert bool(refused) == (after == "running"), done.refusals


def test_an_operator_preempt_or_pin_leaves_a_job_at_its_last_step_running(
        store: Store, tmp_path: Path) -> None:
    ex, ctl, caller = setup(store, tmp_path, "fifo")
    job = submit(store, ex, caller, 0.0, 600.0, gpus=2, lo=1)
    ctl.step(0.0)
    ex.reports[str(job)] = LAST
    store.request(job, caller, "preempt", "", 1.0, preempt_requested=True)
    ex.now = 1.0
    ctl.step(1.0)
    assert state(store, job) == "running"
    store.request(job, caller, "resize", "", 2.0, pin_workers=1)
    ex.now = 2.0
    ctl.step(2.0)
    assert state(store, job) == "running"
    ex.reports[str(job)] = BEFORE_LAST  # the same requests before the last step are carried out
    store.request(job, caller, "preempt", "", 3.0, preempt_requested=True)
    ex.now = 3.0
    ctl.step(3.0)
    assert state(store, job) == "checkpointing"


def test_the_policy_view_marks_a_job_finishing_by_its_report(store: Store, tmp_path: Path) -> None:
    ex, ctl, caller = setup(store, tmp_path)
    job_id = submit(store, ex, caller, 0.0, 600.0)
    ctl.step(0.0)
    row = store.get_job(job_id)
    assert row is not None

    def seen(report: dict[str, Any] | None) -> JobStatus:
        return status_of(row, "admin", 0.0, ScalingModel(), report, 1.0)

    assert [seen(r).finishing for r in (LAST, FINISHED, BEFORE_LAST, None)] == [True, True, False, False]
