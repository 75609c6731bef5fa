"""The per-worker cgroup: real processes in real cgroups of this host (root only).

Every test's cgroups live under a parent of its own (``stint-test-<pid>``), removed at the end
even when the test fails: its processes are killed, its directories removed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stint.runtime.executor import cgroup
from stint.runtime.executor.cgroup import Bounds, Host, WorkerCgroup

PY = sys.executable
MB = 1 << 20
Spawn = Callable[..., "subprocess.Popen[str]"]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")

# Forks children that sleep until a fork fails with EAGAIN (or 100 forks: a bound of its own,
# should the cgroup's fail); prints how many it made.
FORK_BOMB = """
import os, sys, time
made = 0
while made < 100:
    try:
        pid = os.fork()
    except BlockingIOError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
print(made, flush=True)
sys.stdin.read()
"""
# Forks a child that leaves the process group and session, prints its pid, and sleeps.
ESCAPE = """
import os, time
if os.fork() == 0:
    os.setsid()
    print(os.getpid(), flush=True)
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""
WAIT_STDIN = "import sys\nprint('ready', flush=True)\nsys.stdin.read()\n"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _clean(host: Host) -> None:
    """Kill and remove every cgroup under the host's parents, then the parents."""
    for parent in host.parents:
        for entry in os.scandir(parent) if os.path.isdir(parent) else ():
            if entry.is_dir(follow_symlinks=False):
                cg = WorkerCgroup(entry.name, host)
                cg.kill_all()
                cg.remove()
    for parent in host.parents:
        try:
            os.rmdir(parent)
        except FileNotFoundError:
            pass


@pytest.fixture
def host() -> Iterator[Host]:
    if os.geteuid() != 0:
        pytest.skip("cgroups need root")
    h = cgroup.detect(parent=f"stint-test-{os.getpid()}")
    if h.kind == "none":
        pytest.skip(f"no usable cgroups on this host: {h.reason}")
    try:
        yield h
    finally:
        _clean(h)


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """``spawn(cg, code, new_session=False)``: ``python -c code`` whose ``preexec_fn`` joins
    ``cg`` (stdin and stdout pipes, text); killed and waited for at the end."""
    made: list[subprocess.Popen[str]] = []

    def start(cg: WorkerCgroup, code: str, new_session: bool = False) -> subprocess.Popen[str]:
        p = subprocess.Popen([PY, "-c", code], preexec_fn=cg.join,  # noqa: PLW1509
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             start_new_session=new_session)
        made.append(p)
        return p

    yield start
    for p in made:
        p.kill()
        p.wait(timeout=30)
        for f in (p.stdin, p.stdout):
            if f is not None:
                f.close()


def _read(cg: WorkerCgroup, parent: str | None, name: str) -> str:
    assert parent is not None
    return Path(parent, cg.name, name).read_text().strip()


def test_fork_bomb_stops_at_pids_max_and_the_host_still_forks(host: Host, spawn: Spawn) -> None:
    cg = WorkerCgroup.create("bomb-1", Bounds(memory_max=None, pids_max=20), host)
    p = spawn(cg, FORK_BOMB)
    assert p.stdout is not None
    made = int(p.stdout.readline())
    assert 10 <= made and made + 1 <= 20  # it forked until the bound, and no further
    assert len(cg.pids()) == made + 1
    assert subprocess.run(["true"], check=False).returncode == 0  # outside, forks still work
    assert cg.kill_all()
    assert p.wait(timeout=30) == -signal.SIGKILL


def test_memory_hog_is_killed_and_counted(host: Host) -> None:
    bounds = Bounds(memory_max=100 * MB, pids_max=None)
    cg = WorkerCgroup.create("hog-1", bounds, host)
    assert cg.oom_kills() == 0
    hog = "data = b'x' * (400 << 20)\nprint('survived', flush=True)\n"
    r = subprocess.run([PY, "-c", hog], preexec_fn=cg.join, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == -signal.SIGKILL and "survived" not in r.stdout
    assert cg.oom_kills() >= 1
    assert cgroup.describe_oom(bounds) == f"out of memory (memory.max {100 * MB})"


def test_kill_all_kills_a_process_that_left_its_session(host: Host, spawn: Spawn) -> None:
    cg = WorkerCgroup.create("esc-1", Bounds(memory_max=None, pids_max=None), host)
    p = spawn(cg, ESCAPE, new_session=True)
    assert p.stdout is not None
    escaped = int(p.stdout.readline())
    os.killpg(p.pid, signal.SIGKILL)  # what the supervisor's process-group kill reaches
    p.wait(timeout=30)
    assert _alive(escaped) and escaped in cg.pids()
    assert cg.kill_all()
    assert not _alive(escaped) and cg.pids() == []
    cg.remove()
    assert not any(os.path.exists(d) for d in cg.dirs)
    cg.remove()  # already gone: fine


def test_cpu_weight_is_written_as_shares(host: Host) -> None:
    if host.cpu is None:
        pytest.skip("no cpu controller on this host")
    cg = WorkerCgroup.create("cpu-1", Bounds(memory_max=None, pids_max=None, cpu_weight=50), host)
    if host.kind == "v2":
        assert _read(cg, host.cpu, "cpu.weight") == "50"
    else:
        assert _read(cg, host.cpu, "cpu.shares") == "512"


def test_create_again_reuses_the_cgroup_and_rewrites_its_limits(host: Host, spawn: Spawn) -> None:
    cg = WorkerCgroup.create("same-1", Bounds(memory_max=200 * MB, pids_max=10), host)
    p = spawn(cg, WAIT_STDIN)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    again = WorkerCgroup.create("same-1", Bounds(memory_max=None, pids_max=30), host)
    assert again == cg and p.pid in again.pids()
    assert _read(cg, host.pids, "pids.max") == "30"
    memory_file = "memory.max" if host.kind == "v2" else "memory.limit_in_bytes"
    assert _read(cg, host.memory, memory_file) != str(200 * MB)  # unbounded again


def test_sweep_removes_stale_empty_cgroups_only(host: Host, spawn: Spawn) -> None:
    none = Bounds(memory_max=None, pids_max=None)
    kept, stale, busy = (WorkerCgroup.create(n, none, host) for n in ("keep-1", "stale-1", "busy-1"))
    p = spawn(busy, WAIT_STDIN)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    assert cgroup.sweep(host, keep=lambda name: name == "keep-1") == ["stale-1"]
    assert all(os.path.isdir(d) for d in kept.dirs + busy.dirs)
    assert not any(os.path.exists(d) for d in stale.dirs)


def test_join_in_preexec_fn_moves_the_child_before_its_program_runs(host: Host,
                                                                     spawn: Spawn) -> None:
    cg = WorkerCgroup.create("join-1", Bounds(memory_max=None, pids_max=None), host)
    p = spawn(cg, "import sys\nprint(open('/proc/self/cgroup').read(), flush=True)\n"
                  "sys.stdin.read()\n")
    assert p.stdout is not None
    lines = []
    while (line := p.stdout.readline()) != "\n":
        lines.append(line.strip())
    assert p.pid in cg.pids()
    want = f"/stint-test-{os.getpid()}/join-1"
    if host.kind == "v2":
        assert f"0::{want}" in lines
    else:
        paths = {ctrl: path for _, ctrls, path in (x.split(":", 2) for x in lines)
                 for ctrl in ctrls.split(",")}
        assert paths["memory"].endswith(want) and paths["pids"].endswith(want)
        if host.freezer is not None:
            assert paths["freezer"].endswith(want)


def _unified_mount() -> str | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return left.split()[4]
    return None


@needs_root
def test_v2_membership_and_cgroup_kill_on_a_mount_without_controllers(spawn: Spawn) -> None:
    # What of v2 runs on a host whose cgroup2 mount has no controllers: directories,
    # cgroup.procs, cgroup.kill. (Limits need controllers: not exercised here.)
    mount = _unified_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount")
    parent = os.path.join(mount, f"stint-test-{os.getpid()}")
    host = Host("v2", "controllers-free v2 for a test", (parent,))
    os.mkdir(parent)
    try:
        cg = WorkerCgroup.create("v2-1", Bounds(memory_max=None, pids_max=None), host)
        assert os.path.exists(os.path.join(cg.dirs[0], "cgroup.kill"))
        p = spawn(cg, ESCAPE, new_session=True)
        assert p.stdout is not None
        escaped = int(p.stdout.readline())
        assert f"0::/stint-test-{os.getpid()}/v2-1\n" in Path(f"/proc/{p.pid}/cgroup").read_text()
        assert sorted([p.pid, escaped]) == cg.pids()
        assert cg.kill_all()
        assert p.wait(timeout=30) == -signal.SIGKILL and not _alive(escaped)
        cg.remove()
        assert not os.path.exists(cg.dirs[0])
    finally:
        _clean(host)


def _fake_v2(root: Path, enabled: str) -> Path:
    """A cgroup2 mount table naming ``root/cg``, a directory shaped like a v2 root whose
    ``cgroup.subtree_control`` (and that of ``stint``) already list ``enabled``."""
    (root / "cg" / "stint").mkdir(parents=True)
    (root / "cg" / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for d in (root / "cg", root / "cg" / "stint"):
        (d / "cgroup.subtree_control").write_text(enabled)
    table = root / "mountinfo"
    table.write_text(f"41 31 0:38 / {root}/cg rw,relatime - cgroup2 cgroup2 rw\n")
    return table


@needs_root
def test_detect_takes_a_cgroup2_mount_with_memory_and_pids(tmp_path: Path) -> None:
    table = _fake_v2(tmp_path, "cpu memory pids\n")
    host = cgroup.detect(mountinfo=str(table))
    top = str(tmp_path / "cg" / "stint")
    assert (host.kind, host.parents, host.memory, host.pids, host.cpu) == ("v2", (top,), top,
                                                                           top, top)


@needs_root
def test_detect_reports_a_refusal_as_none(tmp_path: Path) -> None:
    table = _fake_v2(tmp_path, "")
    (tmp_path / "cg" / "cgroup.subtree_control").unlink()
    (tmp_path / "cg" / "cgroup.subtree_control").mkdir()  # reading it fails, as a refusal would
    host = cgroup.detect(mountinfo=str(table))
    assert host.kind == "none" and f"cgroup v2 at {tmp_path}/cg" in host.reason


@needs_root
def test_detect_without_controllers_says_none(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    (tmp_path / "cg").mkdir()
    table.write_text(f"41 31 0:38 / {tmp_path}/cg rw,relatime - cgroup2 cgroup2 rw\n"
                     "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n")
    host = cgroup.detect(mountinfo=str(table))
    assert host.kind == "none" and "memory or pids" in host.reason


@needs_root
def test_loads_by_path_with_the_standard_library_only_and_needs_root() -> None:
    # As the supervisor loads it (python -I, by file path, not put in sys.modules); then
    # detect() with an effective uid that is not root.
    code = (
        "import importlib.util, os, sys\n"
        f"spec = importlib.util.spec_from_file_location('stint_cgroup', {cgroup.__file__!r})\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        "assert not [n for n in sys.modules if n.startswith('stint')], sys.modules\n"
        "os.seteuid(65534)\n"
        "h = m.detect()\n"
        "print(h.kind, h.reason)\n"
    )
    r = subprocess.run([PY, "-I", "-c", code], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("none not root")


def test_apply_rlimits_bounds_the_address_space() -> None:
    bounds = Bounds(memory_max=200 * MB, pids_max=None)
    r = subprocess.run([PY, "-c", "data = bytearray(400 << 20)"],
                       preexec_fn=lambda: cgroup.apply_rlimits(bounds),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1 and "MemoryError" in r.stderr
    r = subprocess.run([PY, "-c", "data = bytearray(100 << 20)"],
                       preexec_fn=lambda: cgroup.apply_rlimits(bounds),
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("kw, where", [
    ({"memory_max": 0, "pids_max": None}, "memory_max"),
    ({"memory_max": None, "pids_max": -1}, "pids_max"),
    ({"memory_max": None, "pids_max": None, "cpu_weight": 0}, "cpu_weight"),
])
def test_bad_bounds_are_refused(kw: dict[str, int | None], where: str) -> None:
    with pytest.raises(ValueError, match=where):
        Bounds(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "..", "a/b", "x y", "../../etc"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="cgroup name"):
        WorkerCgroup(name, Host("v1", "", ("/nonexistent",)))
