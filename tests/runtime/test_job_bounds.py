"""A job's bounds, kept by the controller over real processes: the time limit, hang detection,
retries after a backoff (per-job ``max_retries``), launches the host refused for now, and the
bounds the API accepts within the operator's maximums and hands to the executor."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from rt_helpers import MLP, FlakyExecutor, Harness, ServeProc, counter_cmd, wait_for

from stint.config import Limits, UserLimits
from stint.runtime.api import ApiSettings, create_app
from stint.runtime.executor.base import LaunchError
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.store import Store
from stint.runtime.tables import Transition


def _after(transitions: list[Transition], i: int) -> float:
    """Seconds from transition ``i`` to the next one."""
    return transitions[i + 1].at - transitions[i].at


def test_a_failed_attempt_is_retried_only_after_its_backoff(h: Harness, tmp_path: Path) -> None:
    """The backoff doubles from retry_backoff_s up to retry_backoff_max_s; FIFO, with the GPUs
    free, would relaunch at once, so the waits show the policy is not offered the job before
    its retry is due. A job's own max_retries wins over the server's, either way."""
    h.configure(max_retries=1, retry_backoff_s=1.0, retry_backoff_max_s=1.5)
    broken = h.submit(counter_cmd(3, tmp_path / "broken", "--fail-first", "99"), max_retries=2)
    once = h.submit(counter_cmd(3, tmp_path / "once", "--fail-first", "99"), max_retries=0)
    job = h.run_until(broken, lambda j: j.state == "failed", "the broken job to fail", 60)
    assert job.failures == 3 and "gave up after 2 retries" in job.reason
    trans = h.store.transitions(broken)
    waits = [i for i, t in enumerate(trans) if t.dst == "preempted"]
    assert len(waits) == 2
    assert "retry 1 of 2 from the last checkpoint in 1 s, at " in trans[waits[0]].reason
    assert "retry 2 of 2 from the last checkpoint in 1.5 s, at " in trans[waits[1]].reason
    assert _after(trans, waits[0]) >= 1.0 and _after(trans, waits[1]) >= 1.5
    job = h.run_until(once, lambda j: j.state == "failed", "the job without retries to fail")
    assert job.failures == 1 and "gave up after 0 retries" in job.reason


@pytest.mark.slow
def test_a_launch_the_host_refuses_for_now_is_retried_and_not_counted(
        h: Harness, tmp_path: Path) -> None:
    """A transient LaunchError (the host short of processes or memory) waits out the backoff and
    tries again without using a retry; after MAX_TRANSIENT_REFUSALS in a row the job fails,
    saying so. A launch that can never succeed still fails at once."""
    inner = LocalExecutor(tmp_path / "executor", nodes=2, gpus_per_node=2)

    def transient(msg: str) -> LaunchError:
        return LaunchError(f"{msg}: fork: Resource temporarily unavailable", transient=True)

    h.configure(FlakyExecutor(inner, {"launch": 2}, transient), max_retries=0,
                retry_backoff_s=0.3, retry_backoff_max_s=0.3)
    out = tmp_path / "out"
    jid = h.submit(counter_cmd(3, out))
    job = h.run_until(jid, lambda j: j.state == "succeeded", "the job to succeed")
    assert (job.attempt, job.failures, job.refusals) == (3, 0, 0)
    refused = [t for t in h.store.transitions(jid) if t.dst == "preempted"]
    assert [t.reason.split("(")[-1] for t in refused] == [
        f"refusal {n} of at most 20 in a row; not counted against max_retries)" for n in (1, 2)]
    assert "Resource temporarily unavailable" in refused[0].reason

    h.configure(FlakyExecutor(inner, {"launch": 99}, transient), retry_backoff_s=0.0)
    jid = h.submit(counter_cmd(3, tmp_path / "never"))
    job = h.run_until(jid, lambda j: j.state == "failed", "the job to give up", 60)
    assert (job.attempt, job.failures) == (21, 0)
    assert "refused 21 launches in a row for want of resources, gave up" in job.reason

    h.configure(FlakyExecutor(inner, {"launch": 1}, LaunchError), max_retries=3)
    jid = h.submit(counter_cmd(3, tmp_path / "permanent"))
    job = h.run_until(jid, lambda j: j.state == "failed", "the job to fail at once")
    assert job.attempt == 1 and job.reason.endswith("cannot run, not retried")


@pytest.mark.slow
def test_time_limit_checkpoints_stops_and_fails_the_job(db_url: str, tmp_path: Path) -> None:
    """`stint submit --time-limit 5 -- sleep 60` through a real `stint serve` (grace 1 s): the
    job is stopped at 5 s of running and fails with the reason; `stint show` shows its bounds;
    the executor is handed the memory and process bounds (the job's, else its user's) and the
    log and directory budgets."""
    conf = tmp_path / "serve.toml"
    conf.write_text('[limits]\nlog_max_bytes = "64M"\njob_disk_max = "2G"\njob_pids_max = 512\n')
    serve = ServeProc(tmp_path / "data", db_url, "--grace", "1", "--config", str(conf))
    serve.start()
    try:
        jid = int(serve.cli("submit", "--time-limit", "5", "--memory", "256M", "--hang-s", "0",
                            "--max-retries", "1", "--", "sleep", "60").strip())
        wait_for(lambda: serve.client().show(jid)["state"] == "failed", 30, "the time limit")
        row = serve.client().show(jid)
        assert row["reason"].startswith("time limit (5 s): stopped"), row["reason"]
        ran = row["finished_at"] - row["first_start_at"]
        assert 5.0 <= ran < 10.0, ran
        assert 5.0 <= row["run_s"] < 10.0 and row["failures"] == 0
        shown = serve.cli("show", str(jid))
        for line in ("memory_max: 256M", "pids_max: default", "time_limit_s: 5 s",
                     "hang_s: 0 s (off)", "max_retries: 1"):
            assert line in shown, shown
        launch = json.loads((serve.data_dir / "executor" / "jobs" / str(jid) / "1" /
                             "launch.json").read_text())
        worker = launch["workers"][0]
        assert (worker["memory_max"], worker["pids_max"]) == (256 << 20, 512)
        assert (worker["log_max_bytes"], worker["disk_max_bytes"]) == (64 << 20, 2 << 30)
    finally:
        serve.stop()


def test_bounds_beyond_the_users_maximum_are_refused_naming_the_field(
        store: Store, tmp_path: Path) -> None:
    store.set_nodes([("node-0", 2)])
    token = store.ensure_admin_token(tmp_path / "admin.token", time.time())
    limits = Limits(UserLimits(job_memory_max=1 << 30, job_pids_max=100, max_time_limit_s=60.0),
                    {"alice": UserLimits(job_memory_max=4 << 30)})
    api = TestClient(create_app(store, ApiSettings(jobs_dir=tmp_path / "jobs", limits=limits)))
    h = {"Authorization": f"Bearer {token}"}
    most = "is more than the most a job of yours may have:"
    for field, value, words in (
            ("memory_max", 2 << 30, f"memory_max (2G) {most} 1G (limits.job_memory_max)"),
            ("pids_max", 101, f"pids_max (101) {most} 100 (limits.job_pids_max)"),
            ("time_limit_s", 61, f"time_limit_s (61 s) {most} 60 s (limits.max_time_limit_s)")):
        r = api.post("/v1/jobs", json={"command": ["x"], field: value}, headers=h)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", field]
        assert r.json()["detail"][0]["msg"] == words
    ok = {"memory_max": 1 << 30, "pids_max": 100, "time_limit_s": 60, "hang_s": 0,
          "max_retries": 7}
    r = api.post("/v1/jobs", json={"command": ["x"], **ok}, headers=h)
    assert r.status_code == 201 and {k: r.json()[k] for k in ok} == ok
    alice = api.post("/v1/tokens", json={"user": "alice"}, headers=h).json()["token"]
    r = api.post("/v1/jobs", json={"command": ["x"], "memory_max": 2 << 30},
                 headers={"Authorization": f"Bearer {alice}"})
    assert r.status_code == 201  # her own maximum is 4G
    r = api.post("/v1/jobs", json={"command": ["x"], "memory_max": 1000}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "memory_max"]


def test_a_bad_size_is_one_line_naming_the_flag() -> None:
    from typer.testing import CliRunner

    from stint.cli import app

    r = CliRunner().invoke(app, ["submit", "--memory", "16Q", "--server", "http://127.0.0.1:9",
                                 "--token", "t", "--", "true"])
    assert r.exit_code == 2 and "error: --memory: '16Q' is not a size" in r.output
    assert "Traceback" not in r.output


HEARTBEAT = """
import os, pathlib, sys, time
beat = pathlib.Path(os.environ["STINT_HEARTBEAT_FILE"])
attempt = int(os.environ["STINT_ATTEMPT"])
for _ in range(10 if attempt == 1 else 15):
    beat.touch()
    time.sleep(0.2)
if attempt == 1:
    time.sleep(60)  # alive, but no longer beating: hung
"""


@pytest.mark.slow
def test_a_job_whose_heartbeat_stops_is_restarted_and_one_that_never_reports_is_not_judged(
        h: Harness, tmp_path: Path) -> None:
    h.configure(hang_s=2.0, retry_backoff_s=0.2)
    beating = h.submit([sys.executable, "-c", HEARTBEAT])
    silent = h.submit(["sleep", "6"])  # no SDK, no heartbeat: never called hung
    job = h.run_until(beating, lambda j: j.state == "succeeded", "the restarted job", 60)
    assert (job.attempt, job.failures) == (2, 1)
    hung = [t for t in h.store.transitions(beating) if t.dst == "preempted"]
    assert len(hung) == 1 and hung[0].reason.startswith("hung: no heartbeat for "), hung[0].reason
    job = h.run_until(silent, lambda j: j.state == "succeeded", "the silent job")
    assert (job.attempt, job.failures) == (1, 0)


def _worker_pid(root: Path, job: int, attempt: int, rank: int) -> int:
    path = root / "executor" / "jobs" / str(job) / str(attempt) / f"rank-{rank}.child"
    wait_for(lambda: path.exists() and path.read_text().strip(), 60, "the worker's pid")
    return int(json.loads(path.read_text())["pid"])


@pytest.mark.slow
def test_an_sdk_job_with_a_stopped_rank_is_restarted_as_hung_and_finishes(
        h: Harness, tmp_path: Path) -> None:
    """examples/mlp.py on 2 workers with --hang-s 4: rank 1 SIGSTOPped once steps are reported
    and a checkpoint is taken (rank 0 then waits for it in every step: the step stalls); the job
    is killed and restarted within 2 x hang_s (plus a check's and a report's second), resumes
    from its checkpoint, and the restarted attempt -- whose start takes what it takes -- is not
    judged hung before it reports, and finishes."""
    hang = 4.0
    h.configure(retry_backoff_s=0.5, grace_s=5.0)
    jid = h.submit([sys.executable, MLP, "--steps", "60", "--sleep", "0.1",
                    "--checkpoint-every", "5"], gpus=2, hang_s=hang)
    status = tmp_path / "jobs" / str(jid) / "status.json"

    def progressed() -> bool:
        if not status.exists():
            return False
        rec = json.loads(status.read_text() or "{}")
        return (rec.get("checkpoint_step") or 0) >= 5

    wait_for(progressed, 180, "steps and a checkpoint", tick=lambda: h.ctl.step(time.time()))
    pid = _worker_pid(tmp_path, jid, 1, 1)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.time()
    try:
        job = h.run_until(jid, lambda j: j.attempt == 2, "the restart", 60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: status {status.read_text()}, transitions " + "; ".join(
            f"{t.at - stopped_at:.1f} {t.dst} {t.reason}" for t in h.store.transitions(jid)))
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    hung = [t for t in h.store.transitions(jid) if t.reason.startswith("hung: no step for ")]
    assert [t.dst for t in hung] == ["checkpointing", "preempted"], hung
    assert hung[0].at - stopped_at <= 2 * hang + 2.0, hung[0].at - stopped_at
    job = h.run_until(jid, lambda j: j.state == "succeeded", "the job to finish", 240)
    assert (job.attempt, job.failures) == (2, 1), "\n".join(
        f"{t.at:.1f} {t.dst} {t.reason}" for t in h.store.transitions(jid))
    log = (tmp_path / "jobs" / str(jid) / "log.txt").read_text()
    assert "done step 60" in log
