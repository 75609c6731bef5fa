"""The live fleet's parts on loopback: the copy service (verified on arrival; a bad or lost
source swaps nothing in) and the remote executor (an agent over HTTP; one that stops is a
cluster whose nodes are down and whose jobs are reported stopped)."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rt_helpers import wait_for

from stint.runtime.copy import CopyError, request_fetch, start_storage
from stint.runtime.executor.base import NodeInfo, Outcome, WorkerLaunch
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.executor.remote import RemoteExecutor, serve_executor


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
    src_server, src = start_storage(src_root)
    dst_server, dst = start_storage(dst_root)
    try:
        r = request_fetch(dst, "7", src)
        assert (r.bytes, r.files) == (300_010, 2)
        got = {p.relative_to(dst_root / "7" / "ckpt").as_posix(): p.read_bytes()
               for p in (dst_root / "7" / "ckpt").rglob("*") if p.is_file()}
        assert got == files  # the old checkpoint is replaced, not merged
        with pytest.raises(CopyError, match="failed its check on arrival"):
            request_fetch(dst, "7", liar)
        with pytest.raises(CopyError, match="failed"):  # a source that is not there
            request_fetch(dst, "7", "127.0.0.1:1")
        assert (dst_root / "7" / "ckpt" / "step-1.ckpt").read_bytes() == files["step-1.ckpt"]
        with pytest.raises(CopyError, match="bad job id"):
            request_fetch(dst, "../etc", src)
    finally:
        src_server.shutdown()
        dst_server.shutdown()


def test_a_remote_executor_and_its_loss(tmp_path: Path) -> None:
    local = LocalExecutor(tmp_path / "state", nodes=1, gpus_per_node=2)
    server = serve_executor(local, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    remote = RemoteExecutor(f"http://127.0.0.1:{server.server_address[1]}",
                            [NodeInfo("node-0", 2)], "a")

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
