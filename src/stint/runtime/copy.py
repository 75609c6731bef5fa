"""The copy service of a cluster's checkpoint storage: a job's checkpoint moves between clusters
over the network, verified on arrival.

Each cluster of a live fleet has one (``stint agent storage --dir DIR --listen HOST:PORT``, or
one ``stint serve`` starts on 127.0.0.1 for a cluster without a ``copy`` address). It serves the
files of ``<dir>/<job>/ckpt/`` and, asked by the control plane, fetches a job's checkpoint from
another cluster's service straight into its own storage, so the bytes cross the link between
the two clusters, not the control plane:

- ``GET /v1/ckpt/JOB`` -> the manifest: every file's relative path, size and SHA-256;
- ``GET /v1/ckpt/JOB/PATH`` -> one file's bytes;
- ``GET /v1/log/JOB`` -> the job's log (``<dir>/JOB/log.txt``), its SHA-256 in ``X-Sha256``;
- ``POST /v1/fetch`` ``{"job": "12", "source": "HOST:PORT", "owner": "alice", "migration": "M"}``
  -> pulls every
  file of the source's manifest into ``<dir>/12/ckpt.incoming/``, checks each file's size and
  SHA-256 as it arrives, then the job's log likewise (the log of every attempt so far: the job's
  next attempt appends to it, so ``stint logs`` of a job that moved shows all its attempts),
  gives both (and ``<dir>/12/`` if it made it) to the job's OS account ``owner`` (null: ours;
  done as root, in a multi-user fleet), then swaps them in for ``<dir>/12/ckpt`` and
  ``<dir>/12/log.txt`` (old ones are removed) and answers ``{"bytes", "seconds", "files",
  "sha256"}`` (the checkpoint's: ``seconds`` from the first file asked to the last one verified;
  ``sha256`` over the manifest; the log is not counted). A mismatch or a lost source is a 502
  naming the file; nothing is swapped in. ``migration`` names the move the copy is for: a
  fetch of a move already copied here answers that copy's report and copies nothing (a control
  plane restarted during a copy asks again, and its first request may reach the service late,
  after the job has started from the copy: it must not swap an old checkpoint in under it). The
  service remembers the last ``REMEMBERED_MOVES`` moves it copied (the oldest forgotten first),
  so a long-lived service's memory stays bounded.

Every call, the peers' included, carries the fleet's secret (``fleet_secret``); one without it is
a 401, so no job can read or replace another's checkpoint or log through the service.

stdlib only (``http.server``/``http.client``): the service runs beside the storage, anywhere.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from stint.runtime import fleet_secret
from stint.runtime.listen import HTTPServer

CHUNK = 256 * 1024
_JOB = re.compile(r"^[0-9]{1,18}$")
FETCH_TIMEOUT_S = 600.0
RECV_BUFFER = 16 * 1024 * 1024  # capped by net.core.rmem_max


class CopyError(RuntimeError):
    """A copy that did not complete: the source unreachable, or a file that failed its check."""


@dataclass(frozen=True, slots=True)
class CopyReport:
    bytes: int
    seconds: float
    files: int
    sha256: str  # over the manifest (paths, sizes, per-file SHA-256)


def manifest(ckpt: Path) -> list[dict[str, Any]]:
    """Every plain file under ``ckpt`` (links are not followed), sorted by path."""
    out = []
    for root, dirs, files in os.walk(ckpt, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            h = hashlib.sha256()
            with path.open("rb") as f:
                while block := f.read(CHUNK):
                    h.update(block)
            out.append({"path": path.relative_to(ckpt).as_posix(), "size": path.stat().st_size,
                        "sha256": h.hexdigest()})
    return out


def _safe(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass(slots=True)
class _Turn:
    lock: threading.Lock
    users: int = 0  # fetches holding or waiting for it (dropped at 0)


_TURNS: dict[tuple[Path, str], _Turn] = {}
_TURNS_GUARD = threading.Lock()  # guards _TURNS and _DONE
REMEMBERED_MOVES = 4096  # moves copied that a repeat fetch is answered from (module docstring)
_DONE: OrderedDict[tuple[Path, str], tuple[str, CopyReport]] = OrderedDict()  # (storage, job) -> last move copied


def fetch(root: Path, job: str, source: str, secret: str, owner: str | None = None,
          migration: str = "") -> CopyReport:
    """Pull job ``job``'s checkpoint from the copy service at ``source`` into ``root``, for the
    job's OS account ``owner`` (None: ours), for the move ``migration`` names. Fetches of one
    job into one storage run one at a time, and one for a move already copied here copies
    nothing (it answers that copy's report): a control plane restarted during a copy asks again
    while the first request may still run, or reach the service after the job has started from
    the second's copy (module docstring)."""
    if not _JOB.match(job):
        raise CopyError(f"bad job id {job!r}")
    key = (root, job)
    with _TURNS_GUARD:
        turn = _TURNS.setdefault(key, _Turn(threading.Lock()))
        turn.users += 1
    try:
        with turn.lock:
            done = _DONE.get(key)
            if migration and done is not None and done[0] == migration:
                return done[1]
            report = _fetch(root, job, source, fleet_secret.headers(secret), owner)
            with _TURNS_GUARD:
                _DONE[key] = (migration, report)
                _DONE.move_to_end(key)
                while len(_DONE) > REMEMBERED_MOVES:
                    _DONE.popitem(last=False)
            return report
    finally:
        with _TURNS_GUARD:
            turn.users -= 1
            if not turn.users:
                del _TURNS[key]


def _fetch(root: Path, job: str, source: str, auth: dict[str, str], owner: str | None
           ) -> CopyReport:
    host, port = _split(source)
    conn = http.client.HTTPConnection(host, port, timeout=FETCH_TIMEOUT_S)
    try:
        conn.connect()
        assert conn.sock is not None
        # A receive buffer as large as the system allows: the link, not this process's turn
        # on a busy CPU, sets the pace (the kernel keeps receiving while it waits).
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
        files = json.loads(_get(conn, f"/v1/ckpt/{job}", source, auth))
        t0 = time.monotonic()  # (the manifest's hashing on the source is not the copy's time)
        incoming = root / job / "ckpt.incoming"
        shutil.rmtree(incoming, ignore_errors=True)
        incoming.mkdir(parents=True)
        total = 0
        for entry in files:
            rel = str(entry["path"])
            if not _safe(rel):
                raise CopyError(f"{source}: unsafe path {rel!r} in job {job}'s manifest")
            total += _pull(conn, source, job, entry, incoming / rel, auth)
        seconds = time.monotonic() - t0
        log = _pull_log(conn, source, job, root / job / "log.incoming", auth)
        if owner is not None:
            _hand_over(root / job, [incoming, *([] if log is None else [log])], owner)
    except (OSError, http.client.HTTPException, ValueError, KeyError, LookupError) as exc:
        raise CopyError(f"copy of job {job}'s checkpoint from {source} failed: {exc}") from None
    finally:
        conn.close()
    if log is not None:
        os.replace(log, root / job / "log.txt")
    dest = root / job / "ckpt"
    old = root / job / "ckpt.old"
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    incoming.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return CopyReport(total, seconds, len(files), digest)


def _hand_over(job_dir: Path, trees: list[Path], owner: str) -> None:
    """Give a verified copy (``trees``), and the job's directory, to the job's account ``owner``,
    as if its own attempts had written them (the shim takes over only an empty directory of ours,
    and appends only to a log of the job's account); only root can, and only root needs to
    (otherwise every job runs as us). A directory of a third account is refused: it is another
    job's."""
    from stint.runtime.executor.shim import resolve_account

    if os.geteuid() != 0:
        return
    acct = resolve_account(owner)
    if job_dir.lstat().st_uid not in (0, acct.uid):
        raise CopyError(f"{job_dir} belongs to uid {job_dir.lstat().st_uid}, not to job "
                        f"{job_dir.name}'s account {owner} (uid {acct.uid})")
    for p in [job_dir, *(q for t in trees for q in [t, *t.rglob("*")])]:
        os.chown(p, acct.uid, acct.gid, follow_symlinks=False)
    os.chmod(job_dir, 0o700)


def _get(conn: http.client.HTTPConnection, path: str, source: str, auth: dict[str, str]) -> bytes:
    conn.request("GET", path, headers=auth)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise CopyError(f"{source}{path}: HTTP {resp.status}: {body[:200]!r}")
    return body


def _pull(conn: http.client.HTTPConnection, source: str, job: str, entry: dict[str, Any],
          path: Path, auth: dict[str, str]) -> int:
    """One file, streamed to disk and checked against its manifest entry."""
    rel = str(entry["path"])
    conn.request("GET", f"/v1/ckpt/{job}/{rel}", headers=auth)
    resp = conn.getresponse()
    if resp.status != 200:
        raise CopyError(f"{source}: {rel}: HTTP {resp.status}: {resp.read()[:200]!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    h, size = hashlib.sha256(), 0
    with path.open("wb") as out:
        while block := resp.read(CHUNK):
            h.update(block)
            out.write(block)
            size += len(block)
    if size != int(entry["size"]) or h.hexdigest() != entry["sha256"]:
        raise CopyError(f"{source}: job {job}'s {rel} failed its check on arrival ({size} bytes, "
                        f"sha256 {h.hexdigest()[:12]}; the manifest says {entry['size']}, "
                        f"{str(entry['sha256'])[:12]})")
    return size


def _pull_log(conn: http.client.HTTPConnection, source: str, job: str, path: Path,
              auth: dict[str, str]) -> Path | None:
    """The job's log into ``path``, checked against its ``X-Sha256``; None if it has none."""
    conn.request("GET", f"/v1/log/{job}", headers=auth)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status == 404:
        return None
    if resp.status != 200:
        raise CopyError(f"{source}: job {job}'s log: HTTP {resp.status}: {body[:200]!r}")
    if hashlib.sha256(body).hexdigest() != resp.getheader("X-Sha256"):
        raise CopyError(f"{source}: job {job}'s log failed its check on arrival")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(body)
    return path


def request_fetch(service: str, job: str, source: str, secret: str, owner: str | None = None,
                  migration: str = "", timeout_s: float = FETCH_TIMEOUT_S) -> CopyReport:
    """Ask the copy service at ``service`` to fetch ``job``'s checkpoint from ``source`` for the
    job's OS account ``owner`` (None: the service's own), for the move ``migration`` names."""
    host, port = _split(service)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("POST", "/v1/fetch", json.dumps({"job": job, "source": source, "owner": owner,
                                                      "migration": migration}),
                     {"Content-Type": "application/json", **fleet_secret.headers(secret)})
        resp = conn.getresponse()
        body = resp.read()
    except (OSError, http.client.HTTPException) as exc:
        raise CopyError(f"copy service {service} unreachable: {exc}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise CopyError(body.decode(errors="replace"))
    d = json.loads(body)
    return CopyReport(int(d["bytes"]), float(d["seconds"]), int(d["files"]), str(d["sha256"]))


class _Handler(BaseHTTPRequestHandler):
    root: Path  # these two are set on the subclass made by ``serve_storage``
    secret: str
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refused(self) -> bool:
        """Answer 401 (and True) unless the call carries the fleet's secret."""
        if fleet_secret.allowed(self.headers.get(fleet_secret.HEADER), self.secret):
            return False
        self.close_connection = True
        self._reply(401, b'{"error": "missing or wrong fleet secret"}')
        return True

    def do_GET(self) -> None:
        if self._refused():
            return None
        parts = self.path.split("/", 4)  # "", "v1", "ckpt", JOB[, PATH]
        if len(parts) == 4 and parts[1:3] == ["v1", "log"] and _JOB.match(parts[3]):
            return self._log(self.root / parts[3] / "log.txt")
        if len(parts) < 4 or parts[1:3] != ["v1", "ckpt"] or not _JOB.match(parts[3]):
            return self._reply(404, b'{"error": "no such path"}')
        ckpt = self.root / parts[3] / "ckpt"
        if len(parts) == 4:
            return self._reply(200, json.dumps(manifest(ckpt)).encode())
        rel = parts[4]
        path = ckpt / rel
        if not _safe(rel) or path.is_symlink() or not path.is_file():
            return self._reply(404, b'{"error": "no such file"}')
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            shutil.copyfileobj(f, self.wfile, CHUNK)

    def _log(self, path: Path) -> None:
        if path.is_symlink() or not path.is_file():
            return self._reply(404, b'{"error": "no log"}')
        body = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Sha256", hashlib.sha256(body).hexdigest())
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self._refused():
            return None
        if self.path != "/v1/fetch":
            return self._reply(404, b'{"error": "no such path"}')
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            owner = body.get("owner")
            report = fetch(self.root, str(body["job"]), str(body["source"]), self.secret,
                           None if owner is None else str(owner), str(body.get("migration") or ""))
        except (CopyError, ValueError, KeyError, TypeError, OSError) as exc:
            return self._reply(502, str(exc).encode(), "text/plain")
        self._reply(200, json.dumps({"bytes": report.bytes, "seconds": report.seconds,
                                     "files": report.files, "sha256": report.sha256}).encode())


def serve_storage(root: Path, host: str, port: int, secret: str) -> ThreadingHTTPServer:
    """A copy service for ``root`` bound to ``host:port`` (port 0: any) answering callers with
    ``secret``, not yet serving (call ``serve_forever``, or ``start_storage`` for a thread)."""
    from stint.runtime.executor.shim import jobs_root

    jobs_root(str(root), os.geteuid() == 0)  # its jobs' attempts write there, as their owners
    handler = type("StorageHandler", (_Handler,), {"root": root, "secret": secret})
    return HTTPServer((host, port), handler)


def start_storage(root: Path, secret: str, host: str = "127.0.0.1", port: int = 0
                  ) -> tuple[ThreadingHTTPServer, str]:
    """A copy service on a daemon thread; returns it and its ``HOST:PORT``."""
    server = serve_storage(root, host, port, secret)
    threading.Thread(target=server.serve_forever, name=f"stint-copy-{root.name}",
                     daemon=True).start()
    return server, f"{host}:{server.server_address[1]}"
