"""A real stint.torch job (2 workers) whose steps are all done is left to end under the real
controller and executor: an operator's preempt and resize are not carried out, and a stop that
lands anyway (sent before its report arrived) ends it as succeeded, one epilogue per worker,
never relaunched."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from rt_helpers import Harness, wait_for

JOB = str(Path(__file__).with_name("last_step_job.py"))
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.mark.slow
def test_a_job_at_its_last_step_is_not_stopped_and_a_late_stop_ends_it_succeeded(
        h: Harness, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = h.submit([sys.executable, JOB, "4", str(release)], gpus=2, lo=1, env={"PYTHONPATH": SRC})
    ex = h.ctl.executor
    wait_for(lambda: (ex.status(str(job)) or {}).get("state") == "finished", 180,
             "the training loop's end", tick=lambda: h.ctl.step(time.time()))
    h.store.request(job, h.caller, "preempt", "", time.time(), preempt_requested=True)
    h.store.request(job, h.caller, "resize", "1", time.time(), pin_workers=1)
    for _ in range(10):
        h.ctl.step(time.time())
        time.sleep(0.1)
    assert h.job(job).state == "running", h.path(job)
    ex.request_stop(str(job), grace_s=60)  # a stop that raced the report: the SDK notes it
    time.sleep(1.0)
    release.touch()
    done = h.run_until(job, lambda j: j.state in ("succeeded", "failed", "preempted"), "its end", 120)
    log = (h.ctl.config.jobs_dir / str(job) / "log.txt").read_text()
    assert (done.state, done.attempt) == ("succeeded", 1), (h.path(job), log)
    assert "checkpointing" not in h.path(job)
    assert [log.count(f"epilogue rank {r} step 4") for r in (0, 1)] == [1, 1], log
    assert "stop requested after the training loop ended" in log
