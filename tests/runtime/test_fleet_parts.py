"""The live fleet's parts on loopback: the copy service (verified on arrival; a bad or lost
source swaps nothing in; the copy is the job's account's) and the remote executor (an agent over
HTTP; one that stops is a cluster whose nodes are down and whose jobs are reported stopped); both
answer only callers with the fleet's secret."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rt_helpers import public_python, wait_for

from stint.runtime import fleet_secret
from stint.runtime.copy import CopyError, CopyReport, request_fetch, serve_storage, start_storage
from stint.runtime.executor.base import ExecutorError, NodeInfo, Outcome, WorkerLaunch
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.executor.remote import RemoteExecutor, serve_executor

SECRET = "s" * 32
RACER = str(Path(__file__).with_name("copy_racer.py"))
PY = public_python()


def _ckpt(root: Path, job: str, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / job / "ckpt" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


class _Liar(BaseHTTPRequestHandler):
    """A source whose file does not match its manifest (corrupted in storage or on the way)."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = (json.dumps([{"path": "a.bin", "size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}])
                .encode() if self.path == "/v1/ckpt/7" else b"abd")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def liar() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Liar)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_checkpoint_is_copied_and_verified(tmp_path: Path, liar: str) -> None:
    src_root, dst_root = tmp_path / "a", tmp_path / "b"
    files = {"step-1.ckpt": b"x" * 300_000, "blobs/ab/cd": b"y" * 10}
    _ckpt(src_root, "7", files)
    _ckpt(dst_root, "7", {"old.ckpt": b"stale"})
    src_server, src = start_storage(src_root, SECRET)
    dst_server, dst = start_storage(dst_root, SECRET)
    try:
        r = request_fetch(dst, "7", src, SECRET)
        assert (r.bytes, r.files) == (300_010, 2)
        got = {p.relative_to(dst_root / "7" / "ckpt").as_posix(): p.read_bytes()
               for p in (dst_root / "7" / "ckpt").rglob("*") if p.is_file()}
        assert got == files  # the old checkpoint is replaced, not merged
        with pytest.raises(CopyError, match="failed its check on arrival"):
            request_fetch(dst, "7", liar, SECRET)
        with pytest.raises(CopyError, match="failed"):  # a source that is not there
            request_fetch(dst, "7", "127.0.0.1:1", SECRET)
        assert (dst_root / "7" / "ckpt" / "step-1.ckpt").read_bytes() == files["step-1.ckpt"]
        with pytest.raises(CopyError, match="bad job id"):
            request_fetch(dst, "../etc", src, SECRET)
    finally:
        src_server.shutdown()
        dst_server.shutdown()


def test_a_second_fetch_for_a_move_already_copied_copies_nothing(tmp_path: Path) -> None:
    # A control plane restarted during a copy asks again; its first request can reach the
    # service after the job has started from the second's copy and written a checkpoint of its
    # own: that late fetch of the same move must not swap the old checkpoint back in.
    src_root, dst_root = tmp_path / "a", tmp_path / "b"
    _ckpt(src_root, "7", {"step-1.ckpt": b"old"})
    src_server, src = start_storage(src_root, SECRET)
    dst_server, dst = start_storage(dst_root, SECRET)
    try:
        first = request_fetch(dst, "7", src, SECRET, migration="a->b@1.5")
        (dst_root / "7" / "ckpt" / "step-2.ckpt").write_bytes(b"new")  # the job ran on b
        assert request_fetch(dst, "7", src, SECRET, migration="a->b@1.5") == first
        assert (dst_root / "7" / "ckpt" / "step-2.ckpt").read_bytes() == b"new"
        assert not (dst_root / "7" / "ckpt.incoming").exists()
        request_fetch(dst, "7", src, SECRET, migration="a->b@9.0")  # a later move copies again
        assert not (dst_root / "7" / "ckpt" / "step-2.ckpt").exists()
    finally:
        src_server.shutdown()
        dst_server.shutdown()


def test_the_service_remembers_only_its_latest_moves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A long-lived copy service must not keep every move it ever copied: the oldest is forgotten
    # past REMEMBERED_MOVES (here 2), while a repeat fetch of a recent move still copies nothing.
    from stint.runtime import copy

    monkeypatch.setattr(copy, "REMEMBERED_MOVES", 2)
    src_root, dst_root = tmp_path / "a", tmp_path / "b"
    for job in ("1", "2", "3"):
        _ckpt(src_root, job, {"step-1.ckpt": b"old"})
    src_server, src = start_storage(src_root, SECRET)
    dst_server, dst = start_storage(dst_root, SECRET)
    try:
        for job in ("1", "2", "3"):
            request_fetch(dst, job, src, SECRET, migration=f"a->b@{job}")
            (dst_root / job / "ckpt" / "step-2.ckpt").write_bytes(b"new")  # the job ran on b
        assert [k[1] for k in copy._DONE if k[0] == dst_root] == ["2", "3"]
        for job in ("2", "3"):
            request_fetch(dst, job, src, SECRET, migration=f"a->b@{job}")
            assert (dst_root / job / "ckpt" / "step-2.ckpt").read_bytes() == b"new"
    finally:
        src_server.shutdown()
        dst_server.shutdown()


def test_the_services_answer_only_the_fleets_secret(tmp_path: Path) -> None:
    # A job on the cluster's machine reaches both services' ports: without the secret it can
    # neither read nor replace another job's checkpoint, nor launch anything as anyone.
    _ckpt(tmp_path / "a", "7", {"step-1.ckpt": b"private"})
    _ckpt(tmp_path / "b", "7", {"step-1.ckpt": b"mine"})
    src_server, src = start_storage(tmp_path / "a", SECRET)
    dst_server, dst = start_storage(tmp_path / "b", SECRET)
    _ckpt(tmp_path / "c", "7", {"step-1.ckpt": b"forged"})
    stranger_server, stranger = start_storage(tmp_path / "c", "other" * 8)
    local = LocalExecutor(tmp_path / "state", nodes=1, gpus_per_node=1)
    agent = serve_executor(local, "127.0.0.1", 0, SECRET)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{agent.server_address[1]}"
    touch = WorkerLaunch("9", 1, 0, 1, 1, "node-0", (0,), ["touch", str(tmp_path / "owned")],
                         str(tmp_path / "9"), str(tmp_path / "9.log"))
    launch = {"workers": [asdict(touch)]}
    try:
        for headers in ({}, fleet_secret.headers("wrong" * 8)):
            for req in (urllib.request.Request(f"http://{src}/v1/ckpt/7/step-1.ckpt", headers=headers),
                        urllib.request.Request(f"http://{dst}/v1/fetch", json.dumps(
                            {"job": "7", "source": src}).encode(), headers, method="POST"),
                        urllib.request.Request(f"{url}/v1/launch", json.dumps(launch).encode(),
                                               headers, method="POST")):
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(req, timeout=10)
                assert refused.value.code == 401
        with pytest.raises(CopyError, match="fleet secret"):
            request_fetch(dst, "7", src, "other" * 8)
        with pytest.raises(CopyError, match="HTTP 401"):  # a peer of another fleet
            request_fetch(dst, "7", stranger, SECRET)
        assert (tmp_path / "b" / "7" / "ckpt" / "step-1.ckpt").read_bytes() == b"mine"
        assert local.running() == {} and not (tmp_path / "owned").exists()
        stranger_plane = RemoteExecutor(url, [NodeInfo("node-0", 1)], "other" * 8, "a")
        with pytest.raises(ExecutorError, match="refused the fleet's secret"):
            stranger_plane.launch([touch])
        assert stranger_plane.down_nodes() == {"node-0"}  # as good as unreachable
    finally:
        for server in (src_server, dst_server, stranger_server, agent):
            server.shutdown()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create an OS account")
def test_a_copy_belongs_to_the_jobs_account() -> None:
    # In a multi-user fleet the copy service runs as root; the job's next attempt runs as its
    # owner and must be able to take over its directory and write beside the copy.
    user = f"stintcp{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True)
    tmp_path = Path(tempfile.mkdtemp(prefix="stint-copy-"))  # traversable by the account
    os.chmod(tmp_path, 0o755)
    try:
        _ckpt(tmp_path / "a", "7", {"step-1.ckpt": b"x" * 10, "blobs/ab": b"y"})
        src_server, src = start_storage(tmp_path / "a", SECRET)
        dst_server, dst = start_storage(tmp_path / "b", SECRET)
        try:
            request_fetch(dst, "7", src, SECRET, user)
        finally:
            src_server.shutdown()
            dst_server.shutdown()
        uid = int(subprocess.run(["id", "-u", user], capture_output=True, text=True,
                                 check=True).stdout)
        job_dir = tmp_path / "b" / "7"
        owners = {p.relative_to(job_dir).as_posix(): p.lstat().st_uid
                  for p in [job_dir, *job_dir.rglob("*")]}
        assert owners == dict.fromkeys([".", "ckpt", "ckpt/step-1.ckpt", "ckpt/blobs",
                                        "ckpt/blobs/ab"], uid)
        os.chmod(tmp_path / "b", 0o755)
        wrote = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                                "touch", str(job_dir / "ckpt" / "step-2.ckpt")], check=False)
        assert wrote.returncode == 0
    finally:
        subprocess.run(["userdel", user], check=False)
        shutil.rmtree(tmp_path)


@pytest.fixture
def account(new_account: Callable[[], str]) -> pwd.struct_passwd:
    """A fresh OS account, deleted at the end."""
    return pwd.getpwnam(new_account())


def _bait(base: Path) -> Path:
    """Root's own: a file and a directory (holding a file) no job account may write or read."""
    bait = base / "bait"
    (bait / "dir").mkdir(parents=True)
    for p in (bait / "marker", bait / "dir" / "marker"):
        p.write_bytes(b"root's own secret\n")
        p.chmod(0o600)
    return bait


def _snapshot(top: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every entry under ``top`` (links not followed): owner, group, mode and a file's bytes."""
    out = {}
    for p in [top, *top.rglob("*")]:
        st = p.lstat()
        out[p.relative_to(top).as_posix()] = (st.st_uid, st.st_gid, st.st_mode,
                                               p.read_bytes() if stat.S_ISREG(st.st_mode) else b"")
    return out


def _tree(top: Path) -> dict[str, bytes | str]:
    """The plain files under ``top`` by path, and what else is there (links not followed)."""
    out: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            p = Path(root) / name
            mode = p.lstat().st_mode
            if stat.S_ISREG(mode):
                out[p.relative_to(top).as_posix()] = p.read_bytes()
            elif not stat.S_ISDIR(mode):
                out[p.relative_to(top).as_posix()] = f"not a plain file (mode {mode:o})"
    return out


class _Racer:
    """``copy_racer.py`` running as ``acct`` over ``job_dir``; paused while the test looks."""

    def __init__(self, mode: str, acct: pwd.struct_passwd, job_dir: Path, base: Path,
                 bait: Path, rels: list[str]) -> None:
        self.ctl = base / f"ctl-{mode}"
        self.ctl.mkdir()
        os.chown(self.ctl, acct.pw_uid, acct.pw_gid)
        self.err = (base / f"racer-{mode}.err").open("wb")
        assert PY is not None
        self.proc = subprocess.Popen(
            ["setpriv", f"--reuid={acct.pw_uid}", f"--regid={acct.pw_gid}", "--clear-groups",
             PY, RACER, mode, str(job_dir), str(self.ctl), str(bait / "marker"), str(bait / "dir"),
             *rels], stderr=self.err)
        self.seen = 0  # lines of ``moves`` read so far

    def _alive(self) -> None:
        assert self.proc.poll() is None, f"the racer died: {Path(self.err.name).read_text()}"

    def pause(self) -> list[tuple[str, str]]:
        """Stop it, and the (name, parked-as) moves of ``ckpt`` and ``log.txt`` since last time."""
        (self.ctl / "pause").touch()
        wait_for(lambda: (self._alive(), (self.ctl / "paused").exists())[1], 30,
                 "the racer to pause", every=0.001)
        lines = (self.ctl / "moves").read_text().splitlines() if (self.ctl / "moves").exists() else []
        new, self.seen = lines[self.seen:], len(lines)
        return [(a, b) for a, b in (line.split() for line in new)]

    def resume(self) -> None:
        (self.ctl / "pause").unlink()
        wait_for(lambda: not (self.ctl / "paused").exists(), 30, "the racer to resume", every=0.001)

    def stop(self) -> dict[str, int]:
        (self.ctl / "stop").touch()
        self.proc.wait(30)
        self.err.close()
        done = self.ctl / "stats"
        stats: dict[str, int] = json.loads(done.read_text()) if done.exists() else {"died": 1}
        return stats


def _landed(job_dir: Path, name: str, moves: list[tuple[str, str]], dir_: bool) -> Path | None:
    """Where what the service swapped in at ``name`` is now: there, or where the racer moved it
    since (the last it moved: it moves only what it did not plant, and plants no directory or
    plain file there)."""
    at = job_dir / name
    mode = at.lstat().st_mode if os.path.lexists(at) else 0
    if stat.S_ISDIR(mode) if dir_ else stat.S_ISREG(mode):
        return at
    parked = [p for n, p in moves if n == name]
    return job_dir / parked[-1] if parked else None


RACE_FILES = {f"step-{i}.ckpt": bytes([65 + i]) * 40_000 for i in range(4)} | {
    "blobs/ab/cd": b"y" * 5_000, "blobs/ef": b"z" * 5_000, "meta.json": b"{}"}
RACE_LOG = b"attempt 1\nattempt 2\n"


@pytest.mark.skipif(os.geteuid() != 0 or PY is None,
                    reason="needs root (to create an OS account) and a Python every account can run")
@pytest.mark.slow
def test_a_jobs_owner_racing_a_fetch_never_makes_root_write_or_chown_elsewhere(
        account: pwd.struct_passwd, base: Path) -> None:
    # The copy service runs as root and writes into the job's directory, which the job's owner
    # controls: a process of hers renames whatever the copy creates there and plants links to
    # root's file and directory (and FIFOs) at every name a copy writes through. Root's own
    # files must stay untouched, and every fetch either lands the verified checkpoint and log
    # or fails with a CopyError (never a hang, never "ok" with something else in place).
    bait = _bait(base)
    before = _snapshot(bait)
    _ckpt(base / "a", "7", RACE_FILES)
    (base / "a" / "7" / "log.txt").write_bytes(RACE_LOG)
    src_server, src = start_storage(base / "a", SECRET)
    dst_server, dst = start_storage(base / "b", SECRET)
    job_dir = base / "b" / "7"
    racer = None
    oks: list[CopyReport] = []
    failures: list[str] = []
    wrong: list[str] = []
    try:
        reference = request_fetch(dst, "7", src, SECRET, account.pw_name)  # lays out its directory
        racer = _Racer("fetch", account, job_dir, base, bait, list(RACE_FILES))
        racer.pause()
        deadline = time.monotonic() + 20
        for i in range(200):
            if time.monotonic() > deadline:
                break
            racer.resume()
            try:
                report = request_fetch(dst, "7", src, SECRET, account.pw_name, timeout_s=30)
            except CopyError as exc:
                report = None
                failures.append(str(exc))
            moves = racer.pause()
            if report is None:
                if "unreachable" in failures[-1]:  # (no answer: the service hung)
                    wrong.append(f"fetch {i} got no answer: {failures[-1]}")
                    break
                continue
            oks.append(report)
            if (report.sha256, report.bytes, report.files) != (reference.sha256, reference.bytes,
                                                               reference.files):
                wrong.append(f"fetch {i} reported {report}, not {reference}")
            ckpt = _landed(job_dir, "ckpt", moves, dir_=True)
            log = _landed(job_dir, "log.txt", moves, dir_=False)
            if ckpt is None or _tree(ckpt) != RACE_FILES:
                wrong.append(f"fetch {i} reported ok; ckpt: {ckpt and _tree(ckpt)}")
            if log is None:  # the racer may have moved its parked copy on again: find it
                log = next((f for f in job_dir.rglob("*") if not f.is_symlink() and f.is_file()
                            and f.read_bytes() == RACE_LOG), None)
            if log is None or log.read_bytes() != RACE_LOG:
                wrong.append(f"fetch {i} reported ok; log.txt: {log and log.read_bytes()!r}")
    finally:
        stats = racer.stop() if racer is not None else {}
        src_server.shutdown()
        dst_server.shutdown()
    print(f"{len(oks)} fetches ok, {len(failures)} refused; racer: {stats}")
    assert _snapshot(bait) == before  # root's file and directory: not written, not chowned
    assert wrong == []
    assert oks and stats["plants"] > 0  # (the race ran, and a fetch can still get through)


@pytest.mark.skipif(os.geteuid() != 0 or PY is None,
                    reason="needs root (to create an OS account) and a Python every account can run")
@pytest.mark.slow
def test_a_jobs_owner_racing_the_source_never_makes_root_serve_what_she_cannot_read(
        account: pwd.struct_passwd, base: Path) -> None:
    # The source's service reads the job's checkpoint and log as root: her process flips its
    # files, ckpt itself and log.txt between what they are and links to root's file and
    # directory (and FIFOs). Nothing of root's may reach the copy; no fetch may hang.
    bait = _bait(base)
    _ckpt(base / "a", "7", RACE_FILES)
    (base / "a" / "7" / "log.txt").write_bytes(RACE_LOG)
    job_dir = base / "a" / "7"
    for p in [job_dir, *job_dir.rglob("*")]:
        os.chown(p, account.pw_uid, account.pw_gid)
    src_server, src = start_storage(base / "a", SECRET)
    dst_server, dst = start_storage(base / "b", SECRET)
    racer = None
    leaked: list[str] = []
    answers = {"ok": 0, "refused": 0}
    try:
        racer = _Racer("serve", account, job_dir, base, bait, list(RACE_FILES))
        deadline = time.monotonic() + 10
        for i in range(200):
            if time.monotonic() > deadline:
                break
            try:
                request_fetch(dst, "7", src, SECRET, timeout_s=30)
                answers["ok"] += 1
            except CopyError as exc:
                answers["refused"] += 1
                if "unreachable" in str(exc):
                    leaked.append(f"fetch {i} got no answer: {exc}")
                    break
            got = _tree(base / "b" / "7")
            leaked += [f"fetch {i}: {rel}" for rel, data in got.items()
                       if isinstance(data, bytes) and b"root's own secret" in data]
    finally:
        stats = racer.stop() if racer is not None else {}
        src_server.shutdown()
        dst_server.shutdown()
    print(f"fetches {answers}; racer: {stats}")
    assert leaked == []
    assert answers["ok"] and stats["parks"] > 0  # (the race ran, and a fetch can still get through)


@pytest.mark.parametrize("name,what", [("ckpt", "symlink"), ("ckpt", "fifo"), ("ckpt", "foreign"),
                                       ("log.txt", "symlink"), ("log.txt", "fifo"),
                                       ("log.txt", "foreign")])
def test_a_fetch_refuses_what_it_does_not_expect_at_the_names_it_replaces(
        tmp_path: Path, name: str, what: str) -> None:
    # What the job's directory holds at ckpt or log.txt is replaced by the copy: a link, a FIFO
    # or another account's file there is not followed or replaced; the copy is refused, naming it.
    if what == "foreign" and os.geteuid() != 0:
        pytest.skip("needs root to give a file to another account")
    _ckpt(tmp_path / "a", "7", {"step-1.ckpt": b"new"})
    (tmp_path / "a" / "7" / "log.txt").write_bytes(b"new log\n")
    _ckpt(tmp_path / "b", "7", {"step-0.ckpt": b"old"})
    (tmp_path / "b" / "7" / "log.txt").write_bytes(b"old log\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "marker").write_bytes(b"keep")
    at = tmp_path / "b" / "7" / name
    if what != "foreign":
        shutil.rmtree(at) if at.is_dir() else at.unlink()
    if what == "symlink":
        at.symlink_to(elsewhere if name == "ckpt" else elsewhere / "marker")
    elif what == "fifo":
        os.mkfifo(at)
    else:
        for p in [at, *at.rglob("*")]:
            os.chown(p, 65534, 65534)  # nobody's
    planted = os.lstat(at)
    why = {"symlink": "is a symbolic link", "fifo": "is a FIFO", "foreign": "belongs to uid 65534"}[what]
    src_server, src = start_storage(tmp_path / "a", SECRET)
    dst_server, dst = start_storage(tmp_path / "b", SECRET)
    try:
        with pytest.raises(CopyError, match=f"{re.escape(str(at))} {why}"):
            request_fetch(dst, "7", src, SECRET, timeout_s=30)
    finally:
        src_server.shutdown()
        dst_server.shutdown()
    assert _tree(elsewhere) == {"marker": b"keep"}
    job_dir = tmp_path / "b" / "7"
    assert sorted(os.listdir(job_dir)) == ["ckpt", "log.txt"]  # nothing swapped in or left behind
    st = os.lstat(at)
    assert (st.st_ino, st.st_mode, st.st_uid) == (planted.st_ino, planted.st_mode, planted.st_uid)
    if name == "log.txt" or what == "foreign":
        assert _tree(job_dir / "ckpt") == {"step-0.ckpt": b"old"}
    if name == "ckpt" or what == "foreign":
        assert (job_dir / "log.txt").read_bytes() == b"old log\n"


def test_the_copy_service_answers_without_waiting_to_coalesce(tmp_path: Path) -> None:
    # A fetch asks for file after file on one kept-alive connection, and each answer is written
    # in parts (headers, then the body): Nagle's algorithm would hold the body back until the
    # client acknowledged the headers, a delayed acknowledgement, per file.
    server = serve_storage(tmp_path, "127.0.0.1", 0, SECRET)
    try:
        with socket.create_connection(server.server_address[:2], timeout=10):
            conn, _ = server.get_request()
            with conn:
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        server.server_close()


def test_a_remote_executor_and_its_loss(tmp_path: Path) -> None:
    local = LocalExecutor(tmp_path / "state", nodes=1, gpus_per_node=2)
    server = serve_executor(local, "127.0.0.1", 0, SECRET)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    remote = RemoteExecutor(f"http://127.0.0.1:{server.server_address[1]}",
                            [NodeInfo("node-0", 2)], SECRET, "a")

    def worker(job: str, code: str, slot: int) -> WorkerLaunch:
        return WorkerLaunch(job, 1, 0, 1, 1, "node-0", (slot,), [sys.executable, "-c", code],
                            str(tmp_path / job / "ckpt"), str(tmp_path / job / "log.txt"))

    try:
        remote.launch([worker("1", "pass", 0)])
        exits = wait_for(remote.poll, 30, "job 1 to end")
        assert [(e.job_id, e.outcome) for e in exits] == [("1", Outcome.SUCCEEDED)]  # type: ignore[union-attr]
        remote.launch([worker("2", "import time; time.sleep(60)", 1)])
        wait_for(lambda: remote.running() == {"2": 1}, 30, "job 2 to run")
        assert remote.down_nodes() == frozenset()
    finally:
        server.shutdown()
        server.server_close()
    # The agent is gone: its nodes are down, the attempt it ran is reported stopped, once.
    lost = remote.poll()
    assert [(e.job_id, e.attempt, e.outcome) for e in lost] == [("2", 1, Outcome.STOPPED)]
    assert "unreachable" in lost[0].reason and remote.poll() == []
    assert remote.down_nodes() == frozenset({"node-0"}) and remote.running() == {}
    local.kill("2")
    wait_for(lambda: not local.running(), 10, "job 2's worker to exit")
