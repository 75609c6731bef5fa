"""The live fleet's parts on loopback: the copy service (verified on arrival; a bad or lost
source swaps nothing in; the copy is the job's account's) and the remote executor (an agent over
HTTP; one that stops is a cluster whose nodes are down and whose jobs are reported stopped); both
answer only callers with the fleet's secret."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rt_helpers import wait_for

from stint.runtime import fleet_secret
from stint.runtime.copy import CopyError, request_fetch, start_storage
from stint.runtime.executor.base import ExecutorError, NodeInfo, Outcome, WorkerLaunch
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.executor.remote import RemoteExecutor, serve_executor

SECRET = "s" * 32


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
