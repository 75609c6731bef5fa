"""Jobs run as their owner's OS account: a real ``stint serve`` as root, two real accounts
(created with useradd, removed afterwards). A non-admin user's job cannot read the admin token,
the store, the supervisors' state, another user's log and checkpoint, or the control plane's
secrets (its environment, its supervisor's ``/proc`` entries); its own checkpoints resume, also
after a move between the clusters of a live fleet (the copy is handed to its account)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from rt_helpers import (
    COUNTER,
    TWO_CLUSTERS,
    ServeProc,
    kill_leftover_workers,
    public_python,
    wait_for,
)

PROBE = str(Path(__file__).with_name("probe_job.py"))
SECRET = f"pg-secret-{uuid.uuid4().hex}"


PY = public_python()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                       reason="needs root and useradd (CI runs as root)"),
    pytest.mark.skipif(PY is None, reason="no Python that every account may execute"),
]


@pytest.fixture
def accounts(new_account: Callable[[], str]) -> tuple[str, str]:
    """Two fresh OS accounts, deleted at the end."""
    return new_account(), new_account()


def _workdir(base: Path, name: str) -> Path:
    d = base / f"work-{name}"
    d.mkdir()
    pw = pwd.getpwnam(name)
    os.chown(d, pw.pw_uid, pw.pw_gid)
    d.chmod(0o700)
    return d


def _probe_report(serve: ServeProc, job: int, token: str) -> dict[str, object]:
    out = serve.cli("logs", str(job), token=token)
    lines = (x.partition("] ")[2] for x in out.splitlines())  # after "[attempt A rank R] "
    line = next(x for x in lines if x.startswith("PROBE "))
    report: dict[str, object] = json.loads(line.removeprefix("PROBE "))
    return report


def _state(serve: ServeProc, job: int) -> str:
    return str(json.loads(serve.cli("show", str(job), "--json"))["state"])


def test_jobs_run_as_their_owner_and_reach_nothing_else(accounts: tuple[str, str],
                                                        base: Path) -> None:
    alice, bob = accounts
    data = base / "data"
    serve = ServeProc(data, f"sqlite:///{data / 'stint.db'}", "--jobs-dir", str(base / "jobs"))
    serve.jobs_dir = base / "jobs"
    serve.env = {**os.environ, "PGPASSWORD": SECRET, "STINT_TOKEN": SECRET}
    serve.start()
    try:
        ta = serve.cli("user", "create", "alice", "--os-user", alice).strip()
        tb = serve.cli("user", "create", "bob", "--os-user", bob).strip()
        wa, wb = _workdir(base, alice), _workdir(base, bob)

        # Bob's job leaves a log and a checkpoint behind.
        bob_cmd = ("import os; d = os.environ['STINT_CKPT_DIR']; os.makedirs(d); "
                   "open(d + '/model.pt', 'w').write('bob-weights'); print('bob-log-line')")
        bjob = int(serve.cli("submit", "--chdir", str(wb), "--", str(PY), "-c", bob_cmd,
                             token=tb))
        wait_for(lambda: _state(serve, bjob) == "succeeded", 60, "bob's job to succeed")
        bob_dir = serve.jobs_dir / str(bjob)
        assert (bob_dir / "ckpt" / "model.pt").read_text() == "bob-weights"

        # Alice's job tries everything it must not reach.
        targets = [data / "admin.token", data / "stint.db", data / "store-id",
                   data / "executor" / "id", bob_dir / "log.txt", bob_dir / "ckpt" / "model.pt"]
        ajob = int(serve.cli("submit", "--chdir", str(wa), "--env", "PROBE_FLAG=on", "--",
                             str(PY), PROBE, SECRET, *map(str, targets), token=ta))
        wait_for(lambda: _state(serve, ajob) == "succeeded", 60, "alice's probe to finish")
        report = _probe_report(serve, ajob, ta)
        assert report["paths"] == {str(t): "denied" for t in targets}
        assert report["parent_environ"] == "denied"  # its supervisor's environment
        assert report["signal_parent"] == "denied"
        assert report["secret_in_env"] is False
        names = report["env_names"]
        assert isinstance(names, list)
        assert not {"PGPASSWORD", "STINT_TOKEN", "STINT_DB", "STINT_SHIM_TOKEN"} & set(names)
        uid = pwd.getpwnam(alice).pw_uid
        assert (report["uid"], report["euid"]) == (uid, uid)
        assert report["cwd"] == str(wa) and report["flag"] == "on"
        assert "bob-log-line" not in serve.cli("logs", str(ajob), token=ta)

        # What the control plane keeps is its own; each job's directory is its owner's.
        assert data.stat().st_mode & 0o777 == 0o700
        adir = serve.jobs_dir / str(ajob)
        for path, mode in ((adir, 0o700), (adir / "log.txt", 0o600)):
            st = path.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (uid, mode), path

        # Alice's own checkpoints still resume: preempt a held counter job, then let it finish.
        out = wa / "counter"
        out.mkdir()
        os.chown(out, uid, pwd.getpwnam(alice).pw_gid)
        cjob = int(serve.cli("submit", "--chdir", str(wa), "--", str(PY), COUNTER, "20",
                             str(out), "--hold", token=ta))
        wait_for(lambda: "starts at step 0" in serve.cli("logs", str(cjob), token=ta), 60,
                 "the counter to start")
        serve.cli("preempt", str(cjob), token=ta)
        ckpt = serve.jobs_dir / str(cjob) / "ckpt" / "counter.json"
        wait_for(lambda: "attempt 2 starts" in serve.cli("logs", str(cjob), token=ta), 60,
                 "the counter to resume from its checkpoint")
        saved = ckpt.read_bytes()
        assert ckpt.stat().st_uid == uid and ckpt.stat().st_mode & 0o077 == 0
        (out / "release").touch()
        wait_for(lambda: _state(serve, cjob) == "succeeded", 60, "the counter to finish")
        result = json.loads((out / "result.json").read_text())
        state = json.loads(saved)
        assert result["resumes"][1][:2] == [2, state["step"]] and state["step"] > 0
        assert f"attempt 2 starts at step {state['step']}" in serve.cli("logs", str(cjob),
                                                                        token=ta)
        assert result["total"] == 20 * 21 // 2
    finally:
        serve.stop()
        kill_leftover_workers(data)


def test_a_user_without_an_os_account_cannot_submit(base: Path) -> None:
    data = base / "data"
    serve = ServeProc(data, f"sqlite:///{data / 'stint.db'}", "--jobs-dir", str(base / "jobs"))
    serve.start()
    try:
        token = serve.cli("token", "create", "carol").strip()
        r = serve.client().http.post("/v1/jobs", json={"command": ["true"]},
                                     headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 403 and "no OS account" in r.json()["detail"]
        r = serve.client().http.post("/v1/tokens", json={"user": "dave",
                                                         "os_user": "no-such-account-x"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "os_user"]
    finally:
        serve.stop()


def test_a_users_job_moves_between_clusters_as_its_owner(accounts: tuple[str, str],
                                                         base: Path) -> None:
    # A live fleet as root: alice's job checkpoints on cluster a, its checkpoint is copied to
    # b (by the copy services, as root) and its next attempt there runs as alice, from it.
    alice, _ = accounts
    data, fleet = base / "data", base / "fleet.toml"
    fleet.write_text(TWO_CLUSTERS)
    serve = ServeProc(data, f"sqlite:///{data / 'stint.db'}", "--jobs-dir", str(base / "jobs"),
                      "--fleet", str(fleet), "--global", "static")
    serve.jobs_dir = base / "jobs"
    serve.start()
    try:
        ta = serve.cli("user", "create", "alice", "--os-user", alice).strip()
        wa = _workdir(base, alice)
        pw = pwd.getpwnam(alice)
        out = wa / "counter"
        out.mkdir()
        os.chown(out, pw.pw_uid, pw.pw_gid)
        job = int(serve.cli("submit", "--chdir", str(wa), "--", str(PY), COUNTER, "20", str(out),
                            "--hold", token=ta))
        wait_for(lambda: "starts at step 0" in serve.cli("logs", str(job), token=ta), 60,
                 "the counter to start on cluster a")
        assert json.loads(serve.cli("show", str(job), "--json"))["cluster"] == "a"
        serve.cli("migrate", str(job), "--to-cluster", "b")
        wait_for(lambda: "attempt 2 starts" in serve.cli("logs", str(job), token=ta), 60,
                 "the counter to resume on cluster b")
        moved = serve.jobs_dir / "b" / str(job)
        for path in (moved, moved / "ckpt", moved / "ckpt" / "counter.json"):
            assert path.stat().st_uid == pw.pw_uid, path  # the copy is alice's, not root's
        (out / "release").touch()
        wait_for(lambda: _state(serve, job) == "succeeded", 60, "the counter to finish")
        detail = json.loads(serve.cli("show", str(job), "--json"))
        assert detail["cluster"] == "b" and detail["copy_bytes"] > 0
        result = json.loads((out / "result.json").read_text())
        assert result["total"] == 20 * 21 // 2 and result["resumes"][1][0] == 2
        # The fleet's secret is the control plane's: no job account can read it.
        assert (data / "fleet.secret").stat().st_mode & 0o077 == 0
        assert data.stat().st_mode & 0o777 == 0o700
    finally:
        serve.stop()
        kill_leftover_workers(data)


# A job that writes the uid it runs as to ``uid`` in its job directory (the parent of its
# checkpoint directory).
WRITE_UID = ("import os; d = os.path.dirname(os.environ['STINT_CKPT_DIR']); "
             "open(d + '/uid', 'w').write(str(os.getuid()))")


def _submit(serve: ServeProc, token: str | None, *args: str) -> int:
    return int(serve.cli("submit", *args, token=token))


def _refused(serve: ServeProc, token: str) -> str:
    """The 403's message of a submission with ``token``."""
    r = serve.client().http.post("/v1/jobs", json={"command": ["true"]},
                                 headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403, r.text
    return str(r.json()["detail"])


def test_a_demoted_admin_never_runs_as_root(accounts: tuple[str, str], base: Path) -> None:
    # The built-in admin's account is the control plane's (root). Once demoted, its
    # submissions are refused, and its job that was queued before the demotion fails at its
    # launch instead of running as root.
    data = base / "data"
    serve = ServeProc(data, f"sqlite:///{data / 'stint.db'}", "--jobs-dir", str(base / "jobs"))
    serve.jobs_dir = base / "jobs"
    serve.start()
    try:
        bob = serve.cli("user", "create", "bob", "--os-user", accounts[1], "--admin").strip()
        release = base / "release"
        hold = _submit(serve, None, "--gpus", "4", "--", "/bin/sh", "-c",
                       f"while [ ! -e {release} ]; do sleep 0.1; done")
        wait_for(lambda: _state(serve, hold) == "running", 60, "the admin's job to hold the GPUs")
        queued = _submit(serve, None, "--", str(PY), "-c", WRITE_UID)
        assert _state(serve, queued) == "queued"

        serve.cli("token", "create", "admin", "--no-admin", token=bob)  # (rewrites admin.token)
        admin = (data / "admin.token").read_text().strip()
        why = _refused(serve, admin)
        assert "not an admin" in why and "'root'" in why
        assert "stint user create admin --os-user ACCOUNT" in why

        release.touch()
        wait_for(lambda: _state(serve, queued) == "failed", 60, "the queued job to fail")
        detail = json.loads(serve.cli("show", str(queued), "--json", token=bob))
        assert "launch refused" in detail["reason"] and "not an admin" in detail["reason"]
        assert not (serve.jobs_dir / str(queued) / "uid").exists()  # it never ran
        assert _state(serve, hold) == "succeeded"
    finally:
        serve.stop()
        kill_leftover_workers(data)


def test_an_admin_runs_jobs_only_as_the_account_it_is_mapped_to(accounts: tuple[str, str],
                                                                 base: Path) -> None:
    alice, _ = accounts
    data = base / "data"
    serve = ServeProc(data, f"sqlite:///{data / 'stint.db'}", "--jobs-dir", str(base / "jobs"))
    serve.jobs_dir = base / "jobs"
    serve.start()
    try:
        # An admin without an OS account submits nothing (no fallback to root) ...
        carol = serve.cli("token", "create", "carol", "--admin").strip()
        why = _refused(serve, carol)
        assert "no OS account" in why and "stint user create carol --os-user ACCOUNT" in why
        assert "no OS account" in serve.cli("whoami", token=carol)

        # ... and the built-in admin mapped to an account runs its jobs as that account.
        serve.cli("user", "create", "admin", "--os-user", alice)
        assert f"jobs run as {alice}" in serve.cli("whoami")
        job = _submit(serve, None, "--chdir", str(_workdir(base, alice)), "--", str(PY), "-c",
                      WRITE_UID)
        wait_for(lambda: _state(serve, job) == "succeeded", 60, "the admin's job to succeed")
        uid = (serve.jobs_dir / str(job) / "uid").read_text()
        assert int(uid) == pwd.getpwnam(alice).pw_uid != 0
    finally:
        serve.stop()
        kill_leftover_workers(data)


FIFO_LOG = ("import os, time\n"
            "log = os.path.join(os.path.dirname(os.environ['STINT_CKPT_DIR']), 'log.txt')\n"
            "if not os.path.exists(log + '.planted'):\n"
            "    os.unlink(log); os.mkfifo(log); open(log + '.planted', 'w').close()\n"
            "time.sleep(300)\n")


def test_a_fifo_for_a_log_fails_its_job_and_stops_no_one_else(accounts: tuple[str, str],
                                                              base: Path) -> None:
    """Alice's job swaps its log for a FIFO, then is preempted: its relaunch fails with the
    reason at once, while bob's job runs, an admin's cancel applies within seconds and the
    controller stays healthy."""
    alice, bob = accounts
    data = base / "data"
    serve = ServeProc(data, f"sqlite:///{data / 'stint.db'}", "--jobs-dir", str(base / "jobs"))
    serve.jobs_dir = base / "jobs"
    serve.start()
    try:
        ta = serve.cli("user", "create", "alice", "--os-user", alice).strip()
        tb = serve.cli("user", "create", "bob", "--os-user", bob).strip()
        bjob = int(serve.cli("submit", "--", str(PY), "-c", "import time; time.sleep(300)",
                             token=tb))
        ajob = int(serve.cli("submit", "--", str(PY), "-c", FIFO_LOG, token=ta))
        planted = serve.jobs_dir / str(ajob) / "log.txt.planted"
        wait_for(planted.exists, 60, "alice's job to plant its FIFO")
        serve.cli("preempt", str(ajob), token=ta)
        wait_for(lambda: _state(serve, ajob) == "failed", 60, "alice's relaunch to fail")
        reason = json.loads(serve.cli("show", str(ajob), "--json"))["reason"]
        assert "FIFO" in reason and "log.txt" in reason, reason
        assert _state(serve, bjob) == "running"
        serve.cli("cancel", str(bjob))  # the admin's
        t0 = time.monotonic()
        wait_for(lambda: _state(serve, bjob) == "cancelled", 30, "the admin's cancel")
        assert time.monotonic() - t0 < 15
        quick = int(serve.cli("submit", "--", str(PY), "-c", "print('ok')", token=tb))
        wait_for(lambda: _state(serve, quick) == "succeeded", 60, "bob's next job")
        health = serve.client().http.get("/v1/health/controller")
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
    finally:
        serve.stop()
        kill_leftover_workers(data)
