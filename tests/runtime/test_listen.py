"""Every connection stint serves HTTP on has ``TCP_NODELAY``: the API of a real ``stint serve``,
the executor agent and the copy service. Without it, each answer's second write (the body after
the head) waits for the client's delayed ACK, and a kept-alive connection stalls ~40 ms a
request. Read back from the server's own end of a client's kept-alive connection."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
from pathlib import Path

from rt_helpers import ServeProc, kill_leftover_workers, peer_nodelay

from stint.runtime import fleet_secret
from stint.runtime.copy import start_storage
from stint.runtime.executor.local import LocalExecutor
from stint.runtime.executor.remote import serve_executor
from stint.runtime.listen import listen

SECRET = "s" * 32
REQUESTS = 20


def _requests(conn: http.client.HTTPConnection, method: str, path: str,
              body: bytes | None = None, headers: dict[str, str] | None = None) -> socket.socket:
    """``REQUESTS`` sequential requests on ``conn``, each a 200; returns the one socket they all
    went over (the connection was kept alive, never reopened)."""
    first: socket.socket | None = None
    for _ in range(REQUESTS):
        conn.request(method, path, body, headers or {})
        r = conn.getresponse()
        assert r.status == 200, (path, r.status, r.read()[:200])
        r.read()
        assert not r.will_close, f"{path}: the server closed the connection"
        assert conn.sock is not None and (first is None or conn.sock is first), "reconnected"
        first = conn.sock
    assert first is not None
    return first


def test_the_listener_gives_every_accepted_connection_nodelay() -> None:
    with listen("127.0.0.1", 0) as server, socket.create_connection(server.getsockname()) as c:
        accepted, _ = server.accept()
        with accepted:
            assert accepted.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY only then
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert peer_nodelay(os.getpid(), c)


def test_served_api_connections_have_nodelay(tmp_path: Path) -> None:
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}")
    serve.start()
    conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=30)
    try:
        sock = _requests(conn, "GET", "/v1/health")
        assert serve.proc is not None
        assert peer_nodelay(serve.proc.pid, sock)
    finally:
        conn.close()
        serve.stop()
        kill_leftover_workers(serve.data_dir)


def test_agent_connections_have_nodelay(tmp_path: Path) -> None:
    local = LocalExecutor(tmp_path / "state", nodes=1, gpus_per_node=1)
    agent = serve_executor(local, "127.0.0.1", 0, SECRET)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    storage, copy_at = start_storage(tmp_path / "storage", SECRET)
    conns = [http.client.HTTPConnection("127.0.0.1", agent.server_address[1], timeout=30),
             http.client.HTTPConnection(copy_at, timeout=30)]
    try:
        calls = _requests(conns[0], "POST", "/v1/running", json.dumps({}).encode(),
                          {**fleet_secret.headers(SECRET), "Content-Type": "application/json"})
        copies = _requests(conns[1], "GET", "/v1/ckpt/7", headers=fleet_secret.headers(SECRET))
        assert peer_nodelay(os.getpid(), calls), "executor agent"
        assert peer_nodelay(os.getpid(), copies), "copy service"
    finally:
        for conn in conns:
            conn.close()
        agent.shutdown()
        storage.shutdown()
        local.close()
