"""What a job may take and reach, enforced by the kernel, with real OS accounts and processes
(root; CI runs as root): the job's variables never reach a privileged process, a planted FIFO
never blocks the executor, and each worker's processes, memory, log and directory are bounded,
with nothing left behind when its attempt ends."""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from exec_helpers import PY, gang, wait_exit, wait_for

from stint.runtime.executor import Outcome, netns
from stint.runtime.executor import cgroup as cg
from stint.runtime.executor.base import LaunchError, WorkerLaunch
from stint.runtime.executor.local import LocalExecutor

ROOT = os.geteuid() == 0
pytestmark = [
    pytest.mark.slow,  # real accounts and processes, several seconds each
    pytest.mark.skipif(not ROOT or not shutil.which("useradd"),
                       reason="needs root and useradd (CI runs as root)"),
]


def _public_python() -> str:
    """A Python every account can run (the venv's may live under root's 0700 home)."""
    for cand in (PY, "/usr/bin/python3", "/usr/local/bin/python3"):
        real = Path(os.path.realpath(cand))
        if real.exists() and all(p.stat().st_mode & 0o001 for p in [real, *real.parents]):
            return str(real)
    pytest.skip("no Python that every account may execute")


@pytest.fixture
def account(new_account: Callable[[], str]) -> str:
    return new_account()


@pytest.fixture
def other(new_account: Callable[[], str]) -> str:
    """A second account (another user of the same cluster)."""
    return new_account()


def _job(base: Path, job: str, code: str, user: str | None = None, slot: int = 0,
         **kw: object) -> list[WorkerLaunch]:
    """One worker of ``python -c code`` as ``user`` on ``slot``, with its own job directory
    under ``base``."""
    (base / "jobs").mkdir(exist_ok=True, mode=0o711)
    job_dir = base / "jobs" / job
    w = gang(base, job, code, slot0=slot)[0]
    return [dataclasses.replace(w, command=(_public_python(), "-c", code), os_user=user,
                                job_dir=str(job_dir), ckpt_dir=str(job_dir / "ckpt"),
                                log_path=str(job_dir / "log.txt"), cwd="/", **kw)]


def _alive(account: str) -> list[str]:
    """The account's processes that still run (a killed orphan may stay a zombie a while:
    this host's init reaps when it will)."""
    out = subprocess.run(["ps", "-u", account, "-o", "pid=,stat=,args="], check=False,
                         capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if line.split()[1][0] not in "ZX"]


def _executor(base: Path, **kw: object) -> LocalExecutor:
    return LocalExecutor(base / "state", nodes=1, gpus_per_node=4, **kw)  # type: ignore[arg-type]


def test_loader_and_interpreter_variables_reach_only_the_worker(account: str, base: Path):
    """PYTHONPATH (a sitecustomize.py) and LD_PRELOAD (a constructor) of the job's own: each
    payload writes a marker naming the uid it ran as; none ran as root, both ran as the user."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc for the LD_PRELOAD payload")
    pwn = base / "pwn"
    pwn.mkdir(mode=0o755)
    marks = base / "marks"
    marks.mkdir(mode=0o777)
    marks.chmod(0o777)
    (pwn / "sitecustomize.py").write_text(
        f"import os\nopen('{marks}/py-' + str(os.getuid()), 'w').close()\n")
    (pwn / "pre.c").write_text(
        "#include <stdio.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void mark(void) {\n"
        f"  char p[256]; snprintf(p, sizeof p, \"{marks}/so-%d\", (int)getuid());\n"
        "  FILE *f = fopen(p, \"w\"); if (f) fclose(f); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(pwn / "pre.so"), str(pwn / "pre.c")],
                   check=True)
    ex = _executor(base)
    uid = pwd.getpwnam(account).pw_uid
    env = {"PYTHONPATH": str(pwn), "LD_PRELOAD": str(pwn / "pre.so")}
    ex.launch(_job(base, "env", "print('hi')", account, env=env))
    assert wait_exit(ex, "env").outcome is Outcome.SUCCEEDED
    found = sorted(p.name for p in marks.iterdir())
    assert "py-0" not in found and "so-0" not in found, found
    assert f"py-{uid}" in found and f"so-{uid}" in found, found


def test_a_fifo_for_a_log_fails_that_launch_at_once(account: str, base: Path):
    """A job that replaced its log with a FIFO: its next launch fails with the reason, without
    waiting on the FIFO; another job launches right after."""
    ex = _executor(base)
    ws = _job(base, "fifo", "print(1)", account)
    ex._prepare(ws)  # its directory, as its first attempt left it
    os.mkfifo(ws[0].log_path)
    os.chown(ws[0].log_path, pwd.getpwnam(account).pw_uid, -1)
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match="FIFO") as info:
        ex.launch(ws)
    assert time.monotonic() - t0 < 5 and not info.value.transient
    ex.launch(_job(base, "other", "print('fine')", account, slot=1))
    assert wait_exit(ex, "other").outcome is Outcome.SUCCEEDED


BOMB = """
import os, time
n = 0
while n < 10000:
    try:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
    except OSError:
        break
print('forked', n, flush=True)
time.sleep(30)
"""


def test_a_fork_bomb_stops_at_its_pids_bound_and_another_job_runs(account: str, other: str,
                                                                 base: Path):
    ex = _executor(base)
    ex.launch(_job(base, "bomb", BOMB, account, pids_max=40))
    log = base / "jobs" / "bomb" / "log.txt"
    wait_for(lambda: log.exists() and "forked" in log.read_text(), 60, "the bomb to stop")
    forked = int(log.read_text().split("forked ")[1].split()[0])
    assert forked < 40, forked
    ex.launch(_job(base, "meanwhile", "print('ran')", other, slot=1))
    assert wait_exit(ex, "meanwhile").outcome is Outcome.SUCCEEDED
    ex.kill("bomb")
    assert wait_exit(ex, "bomb").outcome is Outcome.STOPPED
    assert _alive(account) == [], "processes of the bomb outlived it"


def test_a_memory_hog_is_killed_and_reported_out_of_memory(account: str, base: Path):
    if cg.detect().kind == "none":
        pytest.skip("no usable cgroups on this host: memory is bounded by RLIMIT_AS instead")
    ex = _executor(base)
    hog = "b = bytearray(400 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"
    ex.launch(_job(base, "hog", hog, account, memory_max=100 << 20))
    e = wait_exit(ex, "hog", 60)
    assert e.outcome is Outcome.FAILED
    assert f"out of memory (memory.max {100 << 20})" in e.reason, e.reason


def test_a_log_flood_stays_under_its_cap(account: str, base: Path):
    cap = 1 << 20
    flood = ("import sys\nfor i in range(400000): sys.stdout.write(f'line {i:07d} ' + 'x' * 40 "
             "+ '\\n')\nprint('last line', flush=True)")
    ex = _executor(base)
    ex.launch(_job(base, "flood", flood, account, log_max_bytes=cap))
    assert wait_exit(ex, "flood", 120).outcome is Outcome.SUCCEEDED
    text = (base / "jobs" / "flood" / "log.txt").read_text()
    assert len(text.encode()) <= cap, len(text)
    assert text.startswith(f"[stint] this log reached its cap of {cap} bytes")
    assert text.rstrip().endswith("last line")
    ex.launch(_job(base, "after", "print('ok')", account))
    assert wait_exit(ex, "after").outcome is Outcome.SUCCEEDED


def test_a_setsid_child_does_not_outlive_its_job(account: str, base: Path):
    code = ("import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
            "print('escaped', flush=True)")
    ex = _executor(base)
    ex.launch(_job(base, "escape", code, account))
    assert wait_exit(ex, "escape").outcome is Outcome.SUCCEEDED
    if cg.detect().kind == "none":
        pytest.skip("no usable cgroups: only the worker's process group is swept")
    assert _alive(account) == [], "a setsid child outlived its job"


def test_a_job_over_its_disk_budget_fails(account: str, base: Path):
    code = ("import os, time\nd = os.environ['STINT_CKPT_DIR']\nos.makedirs(d, exist_ok=True)\n"
            "open(d + '/big', 'wb').write(os.urandom(4 << 20))\ntime.sleep(60)")
    ex = _executor(base)
    ex.launch(_job(base, "disk", code, account, disk_max_bytes=1 << 20))
    e = wait_exit(ex, "disk", 30)
    assert e.outcome is Outcome.FAILED and "disk budget exceeded" in e.reason, e.reason


LISTEN = """
import os, socket, time
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()
port = s.getsockname()[1]
open(os.environ['STINT_CKPT_DIR'] + '.port', 'w').write(str(port))
print('listening', port, flush=True)
time.sleep(60)
"""


def test_a_private_network_keeps_the_rendezvous_the_jobs_own(account: str, base: Path):
    if (why := netns.unavailable()) is not None:
        pytest.skip(f"no network namespaces here: {why}")
    ex = _executor(base, network="private")
    ws = _job(base, "rdv", LISTEN.replace("STINT_CKPT_DIR'] + '.port'",
                                          "STINT_CKPT_DIR'].rsplit('/', 1)[0] + '/port'"),
              account)
    ex.launch(ws)
    port_file = base / "jobs" / "rdv" / "port"
    wait_for(port_file.exists, 30, "the job to listen")
    port = int(port_file.read_text())
    with socket.socket() as s, pytest.raises(OSError):
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
    ex.kill("rdv")
    wait_exit(ex, "rdv")
    assert not [n for n in netns.names(f"stint-{ex.sid}-")], "its namespace outlived it"


def test_the_cgroup_of_a_killed_supervisor_is_emptied_when_its_attempt_is_reported(
        account: str, base: Path):
    """A supervisor SIGKILLed cannot sweep its worker's cgroup: the executor does, once it
    reports the attempt, so a `setsid` child of that worker is gone too."""
    if cg.detect().kind == "none":
        pytest.skip("no usable cgroups on this host")
    code = ("import subprocess, time\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
            "print('escaped', flush=True)\ntime.sleep(300)")
    ex = _executor(base)
    ex.launch(_job(base, "orphan", code, account))
    log = base / "jobs" / "orphan" / "log.txt"
    wait_for(lambda: log.exists() and "escaped" in log.read_text(), 30, "the escape")
    sup = int((base / "state" / "jobs" / "orphan" / "0" / "rank-0.pid").read_text()
              .split('"pid": ')[1].split(",")[0])
    os.kill(sup, 9)
    e = wait_exit(ex, "orphan", 60)
    assert e.outcome is Outcome.FAILED
    wait_for(lambda: _alive(account) == [], 10, "the cgroup to be emptied")
    name = ex.cgroup_name("orphan", 0, 0)
    assert not any(os.path.exists(os.path.join(d, name)) for d in cg.detect().parents)
