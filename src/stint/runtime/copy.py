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
  file of the source's manifest into a staging directory of its own (``<dir>/.copy-staging/``,
  see below), checks each file's size and SHA-256 as it arrives, then the job's log likewise
  (the log of every attempt so far: the job's next attempt appends to it, so ``stint logs`` of a
  job that moved shows all its attempts), gives both (and ``<dir>/12/``) to the job's OS account
  ``owner`` (null: ours; done as root, in a multi-user fleet), then swaps them in for
  ``<dir>/12/ckpt`` and ``<dir>/12/log.txt`` (old ones are removed) and answers ``{"bytes",
  "seconds", "files", "sha256"}`` (the checkpoint's: ``seconds`` from the first file asked to
  the last one verified; ``sha256`` over the manifest; the log is not counted). A mismatch or a
  lost source is a 502 naming the file; nothing is swapped in. So is a ``ckpt`` that is not a
  directory, a ``log.txt`` that is not a plain file, or either of another account (a link or a
  FIFO there is never followed). ``migration`` names the move the copy is for: a
  fetch of a move already copied here answers that copy's report and copies nothing (a control
  plane restarted during a copy asks again, and its first request may reach the service late,
  after the job has started from the copy: it must not swap an old checkpoint in under it). The
  service remembers the last ``REMEMBERED_MOVES`` moves it copied (the oldest forgotten first),
  so a long-lived service's memory stays bounded.

In a multi-user fleet the service runs as root while ``<dir>/12/`` is the job's account's, who may
rename, replace or link anything in it at any moment. So the service never goes through a path
there: it opens the job's directory, and what it reads in it, by descriptor without following a
link (``O_NOFOLLOW``; a file only if ``fstat`` says it is a plain file of the directory's owner),
and writes nothing there: a copy is filled, checked and given to its account in
``<dir>/.copy-staging/`` (the service's own, mode 0700, on the jobs' filesystem), then renamed
into the job's directory by descriptor (``renameat``), the old checkpoint renamed out to staging
to be removed there.

Every call, the peers' included, carries the fleet's secret (``fleet_secret``); one without it is
a 401, so no job can read or replace another's checkpoint or log through the service.

stdlib only (``http.server``/``http.client``): the service runs beside the storage, anywhere.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import socket
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stint.runtime import fleet_secret
from stint.runtime.listen import HTTPServer

if TYPE_CHECKING:
    from stint.runtime.executor.shim import Account

CHUNK = 256 * 1024
_JOB = re.compile(r"^[0-9]{1,18}$")
FETCH_TIMEOUT_S = 600.0
RECV_BUFFER = 16 * 1024 * 1024  # capped by net.core.rmem_max
STAGING = ".copy-staging"  # in the storage directory: the service's own (module docstring)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # (a FIFO: no wait)


class CopyError(RuntimeError):
    """A copy that did not complete: the source unreachable, or a file that failed its check."""


@dataclass(frozen=True, slots=True)
class CopyReport:
    bytes: int
    seconds: float
    files: int
    sha256: str  # over the manifest (paths, sizes, per-file SHA-256)


@contextmanager
def _opened(name: str | Path, dir_fd: int | None = None, follow: bool = False) -> Iterator[int]:
    """A descriptor of the directory ``name`` (in ``dir_fd``), closed at the end; never through
    a link unless ``follow`` (only for the storage directory itself: the operator's path)."""
    fd = os.open(name, _DIR & ~(os.O_NOFOLLOW if follow else 0), dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _plain(name: str, dir_fd: int, uid: int) -> int | None:
    """A read descriptor of ``name`` in ``dir_fd`` if it is a plain file of ``uid``; None if it
    is anything else (a link, a FIFO, a directory, another account's file) or not there."""
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
        return fd
    os.close(fd)
    return None


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISREG, "a plain file"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return what
    return f"a file of mode {mode:o}"


def manifest(ckpt_fd: int, uid: int) -> list[dict[str, Any]]:
    """Every plain file of ``uid`` under the directory ``ckpt_fd`` (links are not followed), each
    directory's files by name before its subdirectories by name."""
    out: list[dict[str, Any]] = []
    with os.scandir(ckpt_fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if not entry.is_file(follow_symlinks=False) or (fd := _plain(entry.name, ckpt_fd, uid)) is None:
            continue
        h, size = hashlib.sha256(), 0
        with os.fdopen(fd, "rb") as f:
            while block := f.read(CHUNK):
                h.update(block)
                size += len(block)
        out.append({"path": entry.name, "size": size, "sha256": h.hexdigest()})
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            try:
                with _opened(entry.name, ckpt_fd) as sub:
                    out += [{**e, "path": f"{entry.name}/{e['path']}"} for e in manifest(sub, uid)]
            except OSError:  # (gone, or no longer a directory)
                continue
    return out


def _safe(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def _reached(top_fd: int, dirs: list[str], name: str, uid: int) -> int | None:
    """A read descriptor of the plain file ``name`` of ``uid`` under the directories ``dirs``
    below ``top_fd``, never through a link; None if there is none."""
    fd = os.dup(top_fd)
    try:
        for d in dirs:
            sub = os.open(d, _DIR, dir_fd=fd)
            os.close(fd)
            fd = sub
        return _plain(name, fd, uid)
    except OSError:
        return None
    finally:
        os.close(fd)


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
    with _opened(root, follow=True) as root_fd, _staging(root, root_fd, job) as stage_fd:
        try:
            acct = _account(owner)
            conn.connect()
            assert conn.sock is not None
            # A receive buffer as large as the system allows: the link, not this process's turn
            # on a busy CPU, sets the pace (the kernel keeps receiving while it waits).
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
            files = json.loads(_get(conn, f"/v1/ckpt/{job}", source, auth))
            t0 = time.monotonic()  # (the manifest's hashing on the source is not the copy's time)
            os.mkdir("ckpt", 0o777, dir_fd=stage_fd)
            total = 0
            with _opened("ckpt", stage_fd) as ckpt_fd:
                for entry in files:
                    rel = str(entry["path"])
                    if not _safe(rel):
                        raise CopyError(f"{source}: unsafe path {rel!r} in job {job}'s manifest")
                    total += _pull(conn, source, job, entry, ckpt_fd, auth)
            seconds = time.monotonic() - t0
            log = _pull_log(conn, source, job, stage_fd, auth)
        except (OSError, http.client.HTTPException, ValueError, KeyError, LookupError) as exc:
            raise CopyError(f"copy of job {job}'s checkpoint from {source} failed: {exc}") from None
        finally:
            conn.close()
        names = ["ckpt", *(["log.txt"] if log else [])]
        try:
            with _job_dir(root / job, root_fd, acct) as job_fd:
                if acct is not None:
                    _hand_over(job_fd, stage_fd, names, acct)
                _swap_in(root / job, job_fd, stage_fd, names, acct)
        except OSError as exc:
            raise CopyError(f"job {job}'s copy could not be swapped in: {exc}") from None
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return CopyReport(total, seconds, len(files), digest)


def _account(owner: str | None) -> Account | None:
    """The job's account a copy is given to: only root can, and only root needs to (otherwise
    every job runs as us); None for ours."""
    from stint.runtime.executor.shim import resolve_account

    return None if owner is None or os.geteuid() != 0 else resolve_account(owner)


@contextmanager
def _staging(root: Path, root_fd: int, job: str) -> Iterator[int]:
    """A fresh directory of ours for one fetch of ``job`` in the storage's staging directory
    (``root/.copy-staging``, made if need be: ours, mode 0700, so no job's account can reach what
    is filled there), removed at the end with whatever is left in it."""
    try:
        os.mkdir(STAGING, 0o700, dir_fd=root_fd)
    except FileExistsError:
        pass
    try:
        top_fd = os.open(STAGING, _DIR, dir_fd=root_fd)
    except OSError as exc:
        raise CopyError(f"{root / STAGING}: {exc.strerror}: the copy service's staging directory "
                        "must be a directory of its own") from None
    try:
        if (uid := os.fstat(top_fd).st_uid) != os.geteuid():
            raise CopyError(f"{root / STAGING} belongs to uid {uid}, not to the copy service's "
                            f"(uid {os.geteuid()})")
        os.fchmod(top_fd, 0o700)
        name = f"{job}.{os.getpid()}.{secrets.token_hex(4)}"
        os.mkdir(name, 0o700, dir_fd=top_fd)
        try:
            with _opened(name, top_fd) as fd:
                yield fd
        finally:
            shutil.rmtree(name, dir_fd=top_fd, ignore_errors=True)
    finally:
        os.close(top_fd)


def clear_staging(root: Path) -> None:
    """Remove what fetches of copy services no longer running left in ``root``'s staging
    directory (a service that died mid-copy): each fetch's directory is named after its
    service's process id."""
    try:
        with _opened(root, follow=True) as root_fd, _opened(STAGING, root_fd) as top_fd:
            for name in os.listdir(top_fd):
                pid = name.split(".")[1] if name.count(".") == 2 else ""
                if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
                    shutil.rmtree(name, dir_fd=top_fd, ignore_errors=True)
    except FileNotFoundError:
        pass


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@contextmanager
def _job_dir(path: Path, root_fd: int, acct: Account | None) -> Iterator[int]:
    """A descriptor of the job's directory ``path`` (made, ours, if need be); a CopyError if it
    is not a directory, or is of an account other than ours and the job's ``acct``."""
    try:
        os.mkdir(path.name, 0o700, dir_fd=root_fd)
    except FileExistsError:
        pass
    try:
        fd = os.open(path.name, _DIR, dir_fd=root_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # (a link, or not a directory: say which)
            _expect(path, root_fd, path.name, stat.S_ISDIR, "a directory", acct)
        raise
    try:
        _expect(path, root_fd, path.name, stat.S_ISDIR, "a directory", acct, os.fstat(fd))
        yield fd
    finally:
        os.close(fd)


def _expect(path: Path, dir_fd: int, name: str, is_kind: Callable[[int], bool], kind: str,
            acct: Account | None, st: os.stat_result | None = None) -> os.stat_result | None:
    """What is at ``name`` in ``dir_fd`` (``st``: as found; None: not there), refused with a
    CopyError naming ``path`` unless it is ``kind`` (``is_kind`` of its mode) of ours or of the
    job's account ``acct``: a link or a FIFO there is never followed, nor another's file taken."""
    if st is None:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
    if not is_kind(st.st_mode):
        raise CopyError(f"{path} is {_kind(st.st_mode)}, not {kind}: the copy is refused")
    me = os.geteuid()
    if st.st_uid not in (me, me if acct is None else acct.uid):
        whose = "" if acct is None else f"the job's account {acct.name} (uid {acct.uid}) or "
        raise CopyError(f"{path} belongs to uid {st.st_uid}, not to {whose}the copy service "
                        f"(uid {me}): the copy is refused")
    return st


def _hand_over(job_fd: int, stage_fd: int, names: list[str], acct: Account) -> None:
    """Give a verified copy (``names`` in the staging directory ``stage_fd``), and the job's
    directory, to the job's account ``acct``, as if its own attempts had written them (the shim
    takes over only an empty directory of ours, and appends only to a log of the job's
    account). Done by descriptor, in staging: no job's account reaches the copy until it is
    renamed into the job's directory."""
    for name in names:
        _chown_tree(stage_fd, name, acct.uid, acct.gid)
    os.fchown(job_fd, acct.uid, acct.gid)
    os.fchmod(job_fd, 0o700)


def _chown_tree(dir_fd: int, name: str, uid: int, gid: int) -> None:
    fd = os.open(name, _FILE, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            raise CopyError(f"staged {name} is {_kind(mode)}")  # (staging is ours alone)
        os.fchown(fd, uid, gid)
        if stat.S_ISDIR(mode):
            for entry in os.listdir(fd):
                _chown_tree(fd, entry, uid, gid)
    finally:
        os.close(fd)


def _swap_in(job_dir: Path, job_fd: int, stage_fd: int, names: list[str],
             acct: Account | None) -> None:
    """Rename the staged ``ckpt`` (and ``log.txt`` if in ``names``) into the job's directory in
    place of what is there, by descriptor; what is there must be a directory (a plain file) of
    ours or the job's account's, or nothing; it is checked before anything moves, and the old
    checkpoint again once renamed out to staging (where it is removed), since the job's account
    can replace it meanwhile: then it is put back and the copy refused."""
    dest = job_dir / "ckpt"
    _expect(dest, job_fd, "ckpt", stat.S_ISDIR, "a directory", acct)
    if "log.txt" in names:
        _expect(job_dir / "log.txt", job_fd, "log.txt", stat.S_ISREG, "a plain file", acct)
    try:
        os.rename("ckpt", "ckpt.old", src_dir_fd=job_fd, dst_dir_fd=stage_fd)
        old = True
    except FileNotFoundError:
        old = False
    try:
        if old:
            _expect(dest, stage_fd, "ckpt.old", stat.S_ISDIR, "a directory", acct)
        try:
            os.rename("ckpt", "ckpt", src_dir_fd=stage_fd, dst_dir_fd=job_fd)
        except OSError as exc:
            raise CopyError(f"{dest} was replaced during the copy ({exc.strerror}): the copy is "
                            "refused") from None
    except CopyError as exc:
        if old:
            try:
                os.rename("ckpt.old", "ckpt", src_dir_fd=stage_fd, dst_dir_fd=job_fd)
            except OSError:
                raise CopyError(f"{exc}; the old checkpoint, its place taken, is removed") from None
        raise
    if "log.txt" in names:  # (replaces whatever is there now, never follows it)
        os.replace("log.txt", "log.txt", src_dir_fd=stage_fd, dst_dir_fd=job_fd)


def _get(conn: http.client.HTTPConnection, path: str, source: str, auth: dict[str, str]) -> bytes:
    conn.request("GET", path, headers=auth)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise CopyError(f"{source}{path}: HTTP {resp.status}: {body[:200]!r}")
    return body


def _pull(conn: http.client.HTTPConnection, source: str, job: str, entry: dict[str, Any],
          ckpt_fd: int, auth: dict[str, str]) -> int:
    """One file, streamed to disk under the staged checkpoint ``ckpt_fd`` and checked against its
    manifest entry."""
    rel = str(entry["path"])
    conn.request("GET", f"/v1/ckpt/{job}/{rel}", headers=auth)
    resp = conn.getresponse()
    if resp.status != 200:
        raise CopyError(f"{source}: {rel}: HTTP {resp.status}: {resp.read()[:200]!r}")
    *dirs, name = rel.split("/")
    parent = _made_dirs(ckpt_fd, dirs)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666, dir_fd=parent)
    finally:
        os.close(parent)
    h, size = hashlib.sha256(), 0
    with os.fdopen(fd, "wb") as out:
        while block := resp.read(CHUNK):
            h.update(block)
            out.write(block)
            size += len(block)
    if size != int(entry["size"]) or h.hexdigest() != entry["sha256"]:
        raise CopyError(f"{source}: job {job}'s {rel} failed its check on arrival ({size} bytes, "
                        f"sha256 {h.hexdigest()[:12]}; the manifest says {entry['size']}, "
                        f"{str(entry['sha256'])[:12]})")
    return size


def _made_dirs(top_fd: int, dirs: list[str]) -> int:
    """A new descriptor of the directory ``dirs`` (each a path component) under ``top_fd``, made
    where missing (in staging: ours alone)."""
    fd = os.dup(top_fd)
    for name in dirs:
        try:
            os.mkdir(name, 0o777, dir_fd=fd)
        except FileExistsError:
            pass
        try:
            sub = os.open(name, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = sub
    return fd


def _pull_log(conn: http.client.HTTPConnection, source: str, job: str, stage_fd: int,
              auth: dict[str, str]) -> bool:
    """The job's log into ``log.txt`` in staging, checked against its ``X-Sha256``; False if it
    has none."""
    conn.request("GET", f"/v1/log/{job}", headers=auth)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status == 404:
        return False
    if resp.status != 200:
        raise CopyError(f"{source}: job {job}'s log: HTTP {resp.status}: {body[:200]!r}")
    if hashlib.sha256(body).hexdigest() != resp.getheader("X-Sha256"):
        raise CopyError(f"{source}: job {job}'s log failed its check on arrival")
    fd = os.open("log.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=stage_fd)
    with os.fdopen(fd, "wb") as out:
        out.write(body)
    return True


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
            return self._log(parts[3])
        if len(parts) < 4 or parts[1:3] != ["v1", "ckpt"] or not _JOB.match(parts[3]):
            return self._reply(404, b'{"error": "no such path"}')
        if len(parts) == 5 and not _safe(parts[4]):
            return self._reply(404, b'{"error": "no such file"}')
        files: list[dict[str, Any]] = []
        fd = None
        try:
            with _opened(self.root, follow=True) as root_fd, _opened(parts[3], root_fd) as job_fd:
                uid = os.fstat(job_fd).st_uid  # (the job's account's: its files are)
                with _opened("ckpt", job_fd) as ckpt_fd:
                    if len(parts) == 4:
                        files = manifest(ckpt_fd, uid)
                    else:
                        *dirs, name = parts[4].split("/")
                        fd = _reached(ckpt_fd, dirs, name, uid)
        except FileNotFoundError:  # (no job or no checkpoint: nothing to copy)
            pass
        except OSError as exc:  # (a link, or not a directory: never followed)
            body = json.dumps({"error": f"job {parts[3]}'s checkpoint: {exc.strerror}"})
            return self._reply(404, body.encode())
        if len(parts) == 4:
            return self._reply(200, json.dumps(files).encode())
        return self._file(fd)

    def _file(self, fd: int | None) -> None:
        """One file's bytes: as many as it had when opened (a file that grows meanwhile must
        not spill into the next answer on this connection; one that shrinks ends it)."""
        if fd is None:
            return self._reply(404, b'{"error": "no such file"}')
        with os.fdopen(fd, "rb") as f:
            left = os.fstat(f.fileno()).st_size
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(left))
            self.end_headers()
            while left and (block := f.read(min(CHUNK, left))):
                self.wfile.write(block)
                left -= len(block)
        self.close_connection = self.close_connection or left > 0

    def _log(self, job: str) -> None:
        try:
            with _opened(self.root, follow=True) as root_fd, _opened(job, root_fd) as job_fd:
                fd = _plain("log.txt", job_fd, os.fstat(job_fd).st_uid)
        except OSError:
            fd = None
        if fd is None:
            return self._reply(404, b'{"error": "no log"}')
        with os.fdopen(fd, "rb") as f:
            body = f.read()
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
    clear_staging(root)
    handler = type("StorageHandler", (_Handler,), {"root": root, "secret": secret})
    return HTTPServer((host, port), handler)


def start_storage(root: Path, secret: str, host: str = "127.0.0.1", port: int = 0
                  ) -> tuple[ThreadingHTTPServer, str]:
    """A copy service on a daemon thread; returns it and its ``HOST:PORT``."""
    server = serve_storage(root, host, port, secret)
    threading.Thread(target=server.serve_forever, name=f"stint-copy-{root.name}",
                     daemon=True).start()
    return server, f"{host}:{server.server_address[1]}"
