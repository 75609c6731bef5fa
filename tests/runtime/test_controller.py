"""The controller stepped one iteration at a time over a real LocalExecutor and real processes."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rt_helpers import Harness, counter_cmd, wait_for

from stint.model.allocation import Allocation, Plan
from stint.policies.base import ClusterView, PolicyBase
from stint.runtime.controller import Controller
from stint.runtime.store import load_alloc, record_transition
from stint.runtime.tables import Job


def wait_until_started(job_dir: Path, attempt: int) -> None:
    """Until the job has installed its SIGUSR1 handler (it prints after doing so)."""
    log = job_dir / "log.txt"
    wait_for(lambda: log.exists() and f"attempt {attempt} starts" in log.read_text(),
             what=f"attempt {attempt} to start")


def result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def test_job_runs_to_success_through_each_state(h: Harness, tmp_path: Path) -> None:
    out = tmp_path / "out"
    jid = h.submit(counter_cmd(5, out), gpus=2)
    job = h.run_until(jid, lambda j: j.state == "succeeded", "success")
    assert h.path(jid) == ["queued", "admitted", "starting", "running", "succeeded"]
    assert result(out)["total"] == 15  # 1 + 2 + 3 + 4 + 5
    assert (out / "completions").read_text().splitlines() == ["1"]
    assert job.exit_code == 0 and job.attempt == 1 and job.attained_gpu_s > 0


def test_preempt_checkpoints_and_resumes_from_the_checkpoint(h: Harness, tmp_path: Path) -> None:
    out = tmp_path / "out"
    jid = h.submit(counter_cmd(50, out, "--hold"))
    h.run_until(jid, lambda j: j.state == "running", "running")
    wait_until_started(tmp_path / "jobs" / str(jid), attempt=1)
    h.store.request(jid, h.caller, "preempt", "", time.time(), preempt_requested=True)
    h.run_until(jid, lambda j: j.attempt == 2 and j.state == "running", "second attempt")
    (out / "release").touch()
    h.run_until(jid, lambda j: j.state == "succeeded", "success")
    assert h.path(jid) == ["queued", "admitted", "starting", "running", "checkpointing",
                           "preempted", "resumed", "starting", "running", "succeeded"]
    # The operator's preempt stays a preempt while FIFO, with the GPUs free, already wants the
    # job back: its stop is not relabelled a migration.
    reasons = {t.dst: t.reason for t in h.store.transitions(jid)}
    assert reasons["preempted"].startswith("preempt: checkpointed"), reasons
    assert "migrate" not in reasons["starting"], reasons
    state = result(out)
    assert state["total"] == 50 * 51 // 2
    assert [r[0] for r in state["resumes"]] == [1, 2]  # attempts 1 and 2 ran, each once
    assert (out / "completions").read_text().splitlines() == ["2"]


def test_worker_failures_are_retried_then_the_job_fails(h: Harness, tmp_path: Path) -> None:
    h.configure(max_retries=2, retry_backoff_s=0.1)
    flaky = h.submit(counter_cmd(3, tmp_path / "flaky", "--fail-first", "1"))
    broken = h.submit(counter_cmd(3, tmp_path / "broken", "--fail-first", "99"))
    h.run_until(flaky, lambda j: j.state == "succeeded", "flaky job to succeed")
    job = h.run_until(broken, lambda j: j.state == "failed", "broken job to fail")
    assert job.failures == 3 and "gave up after 2 retries" in job.reason
    assert "exit codes 0:3" in job.reason
    assert h.path(broken).count("preempted") == 2
    assert h.job(flaky).failures == 1


def test_cancel_kills_a_running_job_and_drops_a_queued_one(h: Harness, tmp_path: Path) -> None:
    running = h.submit(counter_cmd(10, tmp_path / "a", "--hold"), gpus=4)
    queued = h.submit(counter_cmd(1, tmp_path / "b"), gpus=4)
    h.run_until(running, lambda j: j.state == "running", "running")
    for jid in (running, queued):
        h.store.request(jid, h.caller, "cancel", "", time.time(), cancel_requested=True)
    h.run_until(running, lambda j: j.state == "cancelled", "cancelled")
    assert h.job(queued).state == "cancelled"
    assert h.path(running)[-2:] == ["checkpointing", "cancelled"]
    assert h.path(queued) == ["queued", "cancelled"]
    assert not (tmp_path / "a" / "completions").exists()


def test_restart_readopts_running_workers_without_a_new_attempt(h: Harness, tmp_path: Path) -> None:
    out = tmp_path / "out"
    jid = h.submit(counter_cmd(20, out, "--hold"))
    h.run_until(jid, lambda j: j.state == "running", "running")
    h.restart().recover(time.time())
    (out / "release").touch()
    job = h.run_until(jid, lambda j: j.state == "succeeded", "success")
    assert job.attempt == 1
    assert (out / "completions").read_text().splitlines() == ["1"]


def test_restart_applies_an_exit_reported_to_the_dead_controller(h: Harness, tmp_path: Path) -> None:
    out = tmp_path / "out"
    jid = h.submit(counter_cmd(2, out))
    h.run_until(jid, lambda j: j.state == "running", "running")
    # The old controller polls the exit (marking it reported) and dies before committing it.
    wait_for(lambda: h.ctl.executor.poll(), what="the exit")
    h.restart().recover(time.time())
    assert h.job(jid).state == "succeeded"
    assert (out / "completions").read_text().splitlines() == ["1"]


def test_restart_carries_out_a_launch_intent_written_before_the_crash(
    h: Harness, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    jid = h.submit(counter_cmd(3, out))
    with h.store.session() as s:  # the intent, as step() writes it just before it would launch
        job = s.get(Job, jid)
        record_transition(s, job, "admitted", time.time(), "test")
        job.attempt = 1
        record_transition(s, job, "starting", time.time(), "test", allocation="[[1, 1]]",
                          slots='{"1": [0]}', holding_since=time.time())
    h.restart().recover(time.time())
    job = h.run_until(jid, lambda j: j.state == "succeeded", "success")
    assert job.attempt == 1 and result(out)["total"] == 6


NO_SDK = """
import os, pathlib, sys, time
out = pathlib.Path(sys.argv[1])
with (out / "starts").open("a") as f:
    f.write(os.environ["STINT_ATTEMPT"] + "\\n")
while not (out / "release").exists():
    time.sleep(0.02)
"""


def test_a_job_without_the_sdk_restarts_from_scratch_when_preempted(
    h: Harness, tmp_path: Path
) -> None:
    out = tmp_path / "plain"
    out.mkdir()
    jid = h.submit([sys.executable, "-c", NO_SDK, str(out)])
    h.run_until(jid, lambda j: j.state == "running", "running")
    wait_for(lambda: (out / "starts").exists(), what="the job to start")
    h.store.request(jid, h.caller, "preempt", "", time.time(), preempt_requested=True)
    h.run_until(jid, lambda j: j.attempt == 2 and j.state == "running", "second attempt")
    assert "stopped without a checkpoint" in h.store.transitions(jid)[-4].reason
    wait_for(lambda: (out / "starts").read_text().split() == ["1", "2"], what="the restart")
    (out / "release").touch()
    job = h.run_until(jid, lambda j: j.state == "succeeded", "success")
    assert job.failures == 0 and job.preemptions == 1  # not the job's fault: no retry used


def test_a_resize_is_no_preemption_and_a_preempted_pinned_job_resumes(h: Harness, tmp_path: Path) -> None:
    """Stopping a job to resize or move it is not a preemption: the job's ``preemptions`` (shown
    by ``stint show`` and the API) stays 0, as the simulator counts it (its records keep
    resizes and migrations apart)."""
    a = h.submit(counter_cmd(100_000, tmp_path / "a"), gpus=2)
    h.run_until(a, lambda j: j.state == "running", "a to run")
    h.store.request(a, h.caller, "resize", "1", time.time(), pin_workers=1)
    job = h.run_until(a, lambda j: j.attempt == 2 and j.state == "running", "the resized attempt")
    assert "resize" in h.store.transitions(a)[-3].reason
    assert job.preemptions == 0
    # An operator's preemption counts, and the pinned job resumes (the policy is asked when it
    # has stopped: it once stayed preempted, the stop being taken for one the plan had made).
    h.store.request(a, h.caller, "preempt", "", time.time(), preempt_requested=True)
    job = h.run_until(a, lambda j: j.attempt == 3 and j.state == "running", "the attempt after the preemption")
    assert job.preemptions == 1 and load_alloc(job.allocation).num_workers == 1
    h.store.request(a, h.caller, "cancel", "", time.time(), cancel_requested=True)
    h.run_until(a, lambda j: j.state == "cancelled", "the cancel")


def test_a_resync_reports_exactly_the_rows_that_changed(h: Harness) -> None:
    """The cache's periodic full reload keeps ``changed`` exact and the stream (the policy's
    index) valid; only an invalidation (a failed step, a restart) bumps the stream."""
    from stint.runtime.cache import JobCache

    a, b = h.submit(["true"]), h.submit(["true"])
    cache = JobCache(0.0, h.ctl.perf, resync_s=10.0)
    with h.store.read() as r:
        assert cache.refresh(r, 0.0) == {a, b}
    stream = cache.stream
    with h.store.read() as r:
        assert cache.refresh(r, 20.0) == set()  # a full reload, nothing changed
    h.store.request(b, h.caller, "cancel", "", 21.0, cancel_requested=True)
    with h.store.read() as r:
        assert cache.refresh(r, 40.0) == {b}  # the request, found by the next full reload too
    assert cache.stream == stream
    cache.invalidate()
    with h.store.read() as r:
        assert cache.refresh(r, 41.0) == {a, b}
    assert cache.stream == stream + 1


def test_the_cache_keeps_its_special_rows_apart_from_the_plain_queued_ones(h: Harness) -> None:
    """The rows a step looks at besides the policy (``special``) follow each refresh, incremental
    or full: a request makes a queued row special, its end drops it from the cache."""
    from sqlalchemy import update

    from stint.runtime.cache import JobCache

    a, b = h.submit(["true"]), h.submit(["true"])
    cache = JobCache(0.0, h.ctl.perf, resync_s=10.0)
    with h.store.read() as r:
        cache.refresh(r, 0.0)
    assert cache.special() == [] and cache.plain() == {a, b}
    h.store.request(b, h.caller, "cancel", "", 1.0, cancel_requested=True)
    with h.store.read() as r:
        assert cache.refresh(r, 1.0) == {b}  # incremental: the request's row
    assert [j.id for j in cache.special()] == [b] and cache.plain() == {a}
    with h.store.session() as w:
        w.execute(update(Job).where(Job.id == b).values(state="cancelled"))
    with h.store.read() as r:
        assert cache.refresh(r, 20.0) == {b}  # a full reload: the row has ended
    assert cache.special() == [] and cache.plain() == {a} and set(cache.rows) == {a}


def test_a_pin_on_a_queued_job_waits_for_the_policy(h: Harness, tmp_path: Path) -> None:
    """An admin's resize of a queued job is recorded; the policy still decides when it starts
    (FIFO: not ahead of the 4-GPU job at the head of the queue)."""
    a = h.submit(counter_cmd(400, tmp_path / "a"), gpus=2)
    h.run_until(a, lambda j: j.state == "running", "a to run")
    head = h.submit(counter_cmd(10, tmp_path / "head"), gpus=4)
    pinned = h.submit(counter_cmd(10, tmp_path / "p"), gpus=1)
    h.store.request(pinned, h.caller, "resize", "1", time.time(), pin_workers=1)
    for _ in range(5):
        h.ctl.step(time.time())
    assert (h.job(head).state, h.job(pinned).state) == ("queued", "queued")
    # why they wait, from the policy (Plan.waiting), in plain language on the job
    assert h.job(head).reason == "capacity: needs 4 GPUs, 2 free"
    assert h.job(pinned).reason == f"behind: behind job {head} (fifo, head of line)"
    h.store.request(a, h.caller, "cancel", "", time.time(), cancel_requested=True)
    h.run_until(pinned, lambda j: j.state == "succeeded", "the pinned job to run after the head")
    assert h.job(head).first_start_at <= h.job(pinned).first_start_at


def test_jobs_that_cannot_run_fail_at_once_and_block_no_one(h: Harness, tmp_path: Path) -> None:
    """A command the OS refuses (2.4 MB of arguments, e.g. a row written before the API checked
    sizes), one that does not exist and one that exits 127 each fail on their first attempt,
    with the reason, unretried; the job behind them runs, and no step raises."""
    huge = h.submit(["/bin/echo", *["x" * 4000] * 600])
    missing = h.submit(["/no/such/program"])
    e127 = h.submit(["sh", "-c", "exit 127"])
    out = tmp_path / "out"
    normal = h.submit(counter_cmd(5, out))
    h.run_until(normal, lambda j: j.state == "succeeded", "the normal job to succeed", 60)
    for jid, why in ((huge, "Argument list too long"), (missing, "No such file"),
                     (e127, "exit codes 0:127")):
        job = h.run_until(jid, lambda j: j.state == "failed", "failure")
        assert (job.attempt, job.failures) == (1, 1), job.reason
        assert why in job.reason and job.reason.endswith("cannot run, not retried")
    assert result(out)["total"] == 15


class _Silent(PolicyBase):
    """Starts the jobs named in ``start`` on node 0 and says nothing of the others."""

    name = "silent"

    def __init__(self, start: set[str]) -> None:
        self.start = start

    def plan(self, view: ClusterView) -> Plan:
        return Plan({st.job_id: Allocation.of({0: st.spec.requested_workers}) for st in view.jobs
                     if st.job_id in self.start and not st.allocation})


def test_a_job_its_policy_gives_no_reason_for_never_shows_submitted(h: Harness, tmp_path: Path) -> None:
    """A policy that explains nothing: the mechanism says why each job it saw waits (too big
    for the free GPUs, or it fits and the policy keeps it back), instead of "submitted"."""
    run = h.submit(counter_cmd(400, tmp_path / "run"), gpus=2)
    big = h.submit(counter_cmd(10, tmp_path / "big"), gpus=3)
    small = h.submit(counter_cmd(10, tmp_path / "small"), gpus=1)
    assert h.job(small).reason == "submitted"
    h.ctl = Controller(h.store, h.ctl.executor, _Silent({str(run)}), h.ctl.config)
    h.run_until(run, lambda j: j.state == "running", "the started job to run")
    assert h.job(big).reason == "capacity: needs 3 GPUs, 2 free"
    assert h.job(small).reason == "held: silent starts other jobs first (2 GPUs free, it needs 1)"


class _Stray(_Silent):
    """Starts what ``_Silent`` does, and also names a job it was never shown."""

    def plan(self, view: ClusterView) -> Plan:
        plan = super().plan(view)
        plan.allocations["424242"] = Allocation.of({1: 1})
        return plan


def test_a_plan_naming_a_job_the_policy_was_not_shown_is_refused_live_too(
        h: Harness, tmp_path: Path) -> None:
    run = h.submit(counter_cmd(5, tmp_path / "run"), gpus=1)
    h.ctl = Controller(h.store, h.ctl.executor, _Stray({str(run)}), h.ctl.config)
    h.run_until(run, lambda j: j.state == "succeeded", "the known job to run")
    assert h.ctl.refused >= 1
