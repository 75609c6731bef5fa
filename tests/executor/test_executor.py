"""The executor contract, exercised with real worker processes (run against every backend)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
from pathlib import Path

import pytest
from exec_helpers import (
    IGNORE_ALL,
    NO_SDK_SLEEP,
    READY,
    TRAP_USR1,
    MakeExecutor,
    gang,
    launch_then_stop,
    wait_exit,
    wait_for,
    wait_ready,
)

from stint.runtime.executor import ExecutorError, Outcome, supervised
from stint.runtime.executor.base import LaunchError
from stint.runtime.executor.local import LocalExecutor

DUMP_ENV = (
    "import json, os\n"
    "keys = [k for k in os.environ if k.startswith('STINT_') or k in "
    "('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES',"
    " 'RAY_AUTH_TOKEN', 'EXTRA')]\n"
    "os.makedirs(os.environ['STINT_CKPT_DIR'], exist_ok=True)\n"
    "path = os.path.join(os.environ['STINT_CKPT_DIR'], 'env-' + os.environ['RANK'] + '.json')\n"
    "json.dump({k: os.environ[k] for k in keys}, open(path, 'w'))\n"
    "print('hello from rank', os.environ['RANK'], flush=True)\n"
)


def test_success_sets_the_environment_and_captures_logs(
    make_ex: MakeExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # The control plane's credentials must not leak into users' jobs.
    monkeypatch.setenv("STINT_TOKEN", "admin-secret")
    monkeypatch.setenv("STINT_SERVER", "http://127.0.0.1:1")
    monkeypatch.setenv("RAY_AUTH_TOKEN", os.environ.get("RAY_AUTH_TOKEN", "ray-secret"))
    ex = make_ex()
    # 3 ranks round-robin over 2 nodes: ranks 0 and 2 on node-0 (slots 0 and 1), rank 1 on node-1.
    ws = gang(tmp_path, "ok", DUMP_ENV, n=3, nodes=("node-0", "node-1"), logical=6)
    ws[2] = dataclasses.replace(ws[2], env={"EXTRA": "x", "STINT_RANK": "2"})
    ex.launch(ws)
    e = wait_exit(ex, "ok")
    assert (e.outcome, dict(e.exit_codes)) == (Outcome.SUCCEEDED, {0: 0, 1: 0, 2: 0})
    envs = [json.loads((tmp_path / "ckpt/ok" / f"env-{r}.json").read_text()) for r in range(3)]
    assert [x["RANK"] for x in envs] == ["0", "1", "2"]
    assert [x["LOCAL_RANK"] for x in envs] == ["0", "0", "1"]
    assert [x["CUDA_VISIBLE_DEVICES"] for x in envs] == ["0", "0", "1"]
    assert [x["STINT_NODE"] for x in envs] == ["node-0", "node-1", "node-0"]
    assert [x.get("EXTRA") for x in envs] == [None, None, "x"]
    for x in envs:
        assert not {"STINT_TOKEN", "STINT_SERVER", "RAY_AUTH_TOKEN"} & set(x)
        assert x["STINT_JOB_ID"] == "ok" and x["STINT_ATTEMPT"] == "0"
        assert x["WORLD_SIZE"] == x["STINT_WORLD_SIZE"] == "3"
        assert x["STINT_LOGICAL_WORLD_SIZE"] == "6"
        assert x["STINT_CKPT_DIR"] == str(tmp_path / "ckpt/ok")
        assert x["MASTER_ADDR"] == x["STINT_MASTER_ADDR"] == "127.0.0.1"
        assert x["MASTER_PORT"] == x["STINT_MASTER_PORT"] == envs[0]["MASTER_PORT"]
        assert x["STINT_STATUS_FILE"].endswith("jobs/ok/status.json")
    log = (tmp_path / "logs/ok.log").read_text()  # every line marked with its attempt and rank
    assert sorted(line for line in log.splitlines() if "hello" in line) == [
        "[attempt 0 rank 0] hello from rank 0",
        "[attempt 0 rank 1] hello from rank 1",
        "[attempt 0 rank 2] hello from rank 2",
    ]
    assert ex.poll() == [] and ex.running() == {}


# Local only: the supervisor that maps codes is the same program under Ray, whose failure path
# the gang and cannot-start tests cover (keeps the Ray tests near their 60 s budget).
@pytest.mark.parametrize("backend", ["local"])
@pytest.mark.parametrize(
    ("code", "rc", "reason"),
    [
        ("import sys; print('boom', file=sys.stderr); sys.exit(3)", 3, "rank 0 exited with code 3"),
        ("import os; os.abort()", -signal.SIGABRT, "rank 0 killed by SIGABRT"),
        ("raise SystemExit(75)", 75, None),  # 75 unasked is still a checkpoint
    ],
)
def test_exit_codes_map_to_outcomes(make_ex: MakeExecutor, tmp_path: Path, code, rc, reason):
    ex = make_ex()
    ex.launch(gang(tmp_path, "j", code))
    e = wait_exit(ex, "j")
    assert e.exit_codes == {0: rc}
    if reason is None:
        assert e.outcome is Outcome.CHECKPOINTED
    else:
        assert (e.outcome, e.reason) == (Outcome.FAILED, reason)
    if rc == 3:
        assert "boom" in (tmp_path / "logs/j.log").read_text()


def test_a_failed_worker_takes_down_its_gang(make_ex: MakeExecutor, tmp_path: Path):
    ex = make_ex()
    code = READY + (
        "import os, sys, time\nready()\n"
        "if os.environ['RANK'] == '1':\n    sys.exit(7)\n"
        "time.sleep(600)\n"
    )
    ex.launch(gang(tmp_path, "g", code, n=2))
    e = wait_exit(ex, "g")
    assert e.outcome is Outcome.FAILED
    assert e.reason == "rank 1 exited with code 7"
    assert e.exit_codes == {0: -signal.SIGKILL, 1: 7}


def test_stop_request_checkpoints_with_exit_75(make_ex: MakeExecutor, tmp_path: Path):
    ex = make_ex()
    e = launch_then_stop(ex, tmp_path, "s", TRAP_USR1, grace_s=30, n=2)
    assert (e.outcome, dict(e.exit_codes)) == (Outcome.CHECKPOINTED, {0: 75, 1: 75})
    assert ex.running() == {}


def test_stop_of_a_script_without_the_sdk_is_a_restart_from_scratch(
    make_ex: MakeExecutor, tmp_path: Path
):
    e = launch_then_stop(make_ex(), tmp_path, "n", NO_SDK_SLEEP, grace_s=30)
    assert e.outcome is Outcome.STOPPED
    assert e.exit_codes == {0: -signal.SIGUSR1}
    assert "killed by SIGUSR1" in e.reason and "from scratch" in e.reason


def test_stop_escalates_to_sigkill_when_the_worker_ignores_it(
    make_ex: MakeExecutor, tmp_path: Path
):
    e = launch_then_stop(make_ex(), tmp_path, "stubborn", IGNORE_ALL, grace_s=0.3)
    assert (e.outcome, dict(e.exit_codes)) == (Outcome.STOPPED, {0: -signal.SIGKILL})
    log = (tmp_path / "logs/stubborn.log").read_text()
    assert "SIGTERM to the worker" in log and "SIGKILL" in log  # the supervisor says what it did


def test_kill_is_reported_as_stopped(make_ex: MakeExecutor, tmp_path: Path):
    ex = make_ex()
    ex.launch(gang(tmp_path, "k", IGNORE_ALL, n=2))
    wait_ready(tmp_path, "k", 2)
    ex.kill("k")
    e = wait_exit(ex, "k")
    assert e.outcome is Outcome.STOPPED and e.reason.startswith("kill requested")
    assert e.exit_codes == {0: -signal.SIGKILL, 1: -signal.SIGKILL}


def test_stop_before_the_worker_is_ready_is_not_lost(make_ex: MakeExecutor, tmp_path: Path):
    # Requested in the same breath as the launch: the supervisors pick it up from stop.json.
    ex = make_ex()
    ex.launch(gang(tmp_path, "early", IGNORE_ALL, n=2))
    ex.kill("early")
    e = wait_exit(ex, "early")
    assert e.outcome is Outcome.STOPPED


def test_launch_is_idempotent_per_attempt(make_ex: MakeExecutor, tmp_path: Path):
    ex = make_ex()
    count = "import os\nopen(os.environ['STINT_CKPT_DIR'] + '/runs', 'a').write('x')\n"
    (tmp_path / "ckpt/once").mkdir(parents=True)
    ws = gang(tmp_path, "once", count + TRAP_USR1)
    ex.launch(ws)
    ex.launch(ws)  # again while running
    wait_ready(tmp_path, "once")
    make_ex().launch(ws)  # again from a new executor object
    ex.request_stop("once")
    assert wait_exit(ex, "once").outcome is Outcome.CHECKPOINTED
    ex.launch(ws)  # again after it ended
    assert ex.running() == {} and ex.poll() == []
    assert (tmp_path / "ckpt/once/runs").read_text() == "x"


def test_launch_refuses_conflicts_and_bad_gangs(make_ex: MakeExecutor, tmp_path: Path):
    ex = make_ex()
    ws = gang(tmp_path, "a", TRAP_USR1)
    ex.launch(ws)
    wait_ready(tmp_path, "a")
    with pytest.raises(ExecutorError, match="attempt 0 is still running"):
        ex.launch(gang(tmp_path, "a", TRAP_USR1, attempt=1, slot0=1))
    with pytest.raises(ExecutorError, match="held by a live worker of job 'a'"):
        ex.launch(gang(tmp_path, "b", TRAP_USR1))
    with pytest.raises(ExecutorError, match="different workers"):
        ex.launch(gang(tmp_path, "a", TRAP_USR1, slot0=1))
    with pytest.raises(ExecutorError, match="unknown node 'node-9'"):
        ex.launch(gang(tmp_path, "c", "pass", nodes=("node-9",)))
    with pytest.raises(ExecutorError, match=r"slots \[2\] outside node 'node-0'"):
        ex.launch(gang(tmp_path, "c", "pass", slot0=2))
    with pytest.raises(ExecutorError, match="ranks must be exactly 0..1"):
        ex.launch(gang(tmp_path, "c", "pass", n=2)[:1])
    with pytest.raises(ExecutorError, match="job_id must match"):
        gang(tmp_path, "../etc", "pass")
    assert ex.running() == {"a": 0}  # the refusals changed nothing
    ex.request_stop("a")
    assert wait_exit(ex, "a").outcome is Outcome.CHECKPOINTED
    ex.launch(gang(tmp_path, "a", "pass", attempt=1))  # the next attempt, once the old one ended
    assert wait_exit(ex, "a").attempt == 1


def test_exits_are_reported_exactly_once_across_executor_objects(
    make_ex: MakeExecutor, tmp_path: Path
):
    first = make_ex()
    first.launch(gang(tmp_path, "x", "pass"))
    first.launch(gang(tmp_path, "y", TRAP_USR1, slot0=1))
    wait_ready(tmp_path, "y")
    del first  # the controller dies; "x" ends while nobody watches
    wait_for(lambda: (tmp_path / "state/jobs/x/0/rank-0.exit").exists(), what="x to end")
    second = make_ex()
    assert second.running() == {"y": 0}  # re-adopted
    assert [(e.job_id, e.outcome) for e in second.poll()] == [("x", Outcome.SUCCEEDED)]
    assert second.poll() == []
    second.request_stop("y")
    assert wait_exit(second, "y").outcome is Outcome.CHECKPOINTED
    third = make_ex()
    assert third.poll() == [] and third.running() == {}
    assert third.exit_of("x", 0).outcome is Outcome.SUCCEEDED  # still there for recovery
    assert third.exit_of("y", 0).exit_codes == {0: 75}
    assert third.exit_of("y", 1) is None


def test_status_file_is_read_back(make_ex: MakeExecutor, tmp_path: Path):
    ex = make_ex()
    code = (
        "import json, os\n"
        "json.dump({'step': 41, 'loss': 0.5}, open(os.environ['STINT_STATUS_FILE'], 'w'))\n"
    )
    assert ex.status("p") is None
    ex.launch(gang(tmp_path, "p", code))
    wait_exit(ex, "p")
    assert ex.status("p") == {"step": 41, "loss": 0.5}


def test_a_command_that_cannot_start_fails_with_the_reason(make_ex: MakeExecutor, tmp_path: Path):
    ex = make_ex()
    ws = [dataclasses.replace(w, command=("/nonexistent/train",)) for w in gang(tmp_path, "nx", "")]
    ex.launch(ws)
    e = wait_exit(ex, "nx")
    assert (e.outcome, dict(e.exit_codes)) == (Outcome.FAILED, {0: 127})
    assert e.reason.startswith("cannot start '/nonexistent/train'")
    assert "No such file or directory" in (tmp_path / "logs/nx.log").read_text()


def test_a_launch_the_os_refuses_raises_launch_error_and_ends_the_attempt(tmp_path: Path):
    """Arguments beyond the OS limit (E2BIG when the supervisor is spawned): LaunchError names
    it, no rank is left running, and the attempt is reported FAILED once with the reason."""
    ex = LocalExecutor(tmp_path / "state", nodes=1, gpus_per_node=2)
    big = ("/bin/echo", *["x" * 4000] * 800)  # 3.2 MB
    ws = [dataclasses.replace(w, command=big) for w in gang(tmp_path, "big", "", n=2)]
    with pytest.raises(LaunchError, match="Argument list too long"):
        ex.launch(ws)
    e = wait_exit(ex, "big")
    assert e.outcome is Outcome.FAILED and "Argument list too long" in e.reason
    assert set(e.exit_codes.values()) == {127} and not ex.running()


def test_the_worker_environment_is_fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PGPASSWORD", "db-secret")
    monkeypatch.setenv("STINT_DB", "postgresql://u:db-secret@h/db")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    ex = LocalExecutor(tmp_path / "state", nodes=1, gpus_per_node=1)
    code = ("import json, os\nos.makedirs(os.environ['STINT_CKPT_DIR'], exist_ok=True)\n"
            "json.dump(dict(os.environ), open(os.environ['STINT_CKPT_DIR'] + '/env', 'w'))\n")
    ws = [dataclasses.replace(w, env={"EXTRA": "1"}) for w in gang(tmp_path, "env", code)]
    ex.launch(ws)
    assert wait_exit(ex, "env").outcome is Outcome.SUCCEEDED
    env = json.loads((tmp_path / "ckpt" / "env" / "env").read_text())
    assert "db-secret" not in json.dumps(env) and "STINT_SHIM_TOKEN" not in env
    assert env["LC_ALL"] == "C.UTF-8" and env["EXTRA"] == "1" and env["PATH"]
    assert (tmp_path / "logs" / "env.log").stat().st_mode & 0o777 == 0o600


def test_an_exit_code_survives_a_failing_write_of_its_record(tmp_path: Path):
    """While the exit record cannot be written (as on a full disk) the supervisor stays alive
    and retries: the attempt is running, not lost, and ends with the worker's real code."""
    ex = LocalExecutor(tmp_path / "state", nodes=1, gpus_per_node=1)
    # The worker blocks the record's path with a directory (os.replace onto it fails, as a
    # write on a full disk does), then exits 5.
    code = ("import os, sys\nd = os.path.dirname(os.environ['STINT_STOP_FILE'])\n"
            "os.makedirs(d + '/rank-0.exit/x')\nsys.exit(5)\n")
    ex.launch(gang(tmp_path, "full", code))
    d = tmp_path / "state" / "jobs" / "full" / "0"
    log = tmp_path / "logs" / "full.log"
    wait_for(lambda: log.exists() and "cannot record the worker's exit code 5" in log.read_text(),
             what="the failed write")
    assert ex.running() == {"full": 0} and ex.poll() == []
    (d / "rank-0.exit" / "x").rmdir()
    (d / "rank-0.exit").rmdir()
    e = wait_exit(ex, "full")
    assert (e.outcome, dict(e.exit_codes)) == (Outcome.FAILED, {0: 5})


def test_output_lines_are_prefixed_as_they_come(tmp_path: Path) -> None:
    """A partial line is copied at once and its rest is not prefixed again; a carriage return
    (a progress bar) starts a line."""
    from stint.runtime.executor.shim import CappedLog, _Prefixer

    src_r, src_w = os.pipe()
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    p = _Prefixer(src_r, "[r0] ", out=CappedLog(log, None))
    for chunk in (b"ab", b"c\nde", b"\n", b"10%\r20%\n"):
        os.write(src_w, chunk)
        assert p.pump()
    os.close(src_w)
    assert not p.pump()
    os.close(src_r)
    os.close(log)
    assert (tmp_path / "log").read_bytes() == b"[r0] abc\n[r0] de\n[r0] 10%\r[r0] 20%\n"


def test_rendezvous_ports_are_outside_the_ephemeral_range() -> None:
    # A port probed from the kernel's ephemeral range can go to another process's outgoing
    # connection before the job's rank 0 binds it (an attempt was lost to "Address already in
    # use" under load); the executor picks its rendezvous ports below that range, free.
    first = int(supervised.EPHEMERAL.read_text().split()[0])
    ports = {supervised._free_port() for _ in range(20)}
    assert all(supervised.MASTER_PORTS_FROM <= p < first for p in ports), ports
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # each was free
