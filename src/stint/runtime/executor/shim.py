"""The supervisor of one worker process: run it, relay stop requests, record how it ended.

Run by file path as ``python -I shim.py --dir D --rank R --spec FILE [--user NAME] [--chdir DIR]
[--prefix TEXT] -- COMMAND...``, so that it imports only the standard library (and its siblings
``cgroup.py`` and ``netns.py``, loaded by path) and starts fast. It runs as root in multi-user mode,
so nothing of the job reaches it: ``-I`` ignores every ``PYTHON*`` variable and the user's site,
and its own environment is fixed by the executor (no variable of the job, no ``LD_*``). The job's
environment and bounds are in ``FILE`` (``rank-R.spec``, written by the executor in the attempt's
state directory, which only the executor's account reads): ``{"env": {...}, "memory_max",
"pids_max", "cpu_weight", "log_max_bytes", "disk_max_bytes", "job_dir", "cgroup", "netns"}``;
they are applied to the worker only, after it took the job's account. Why it exists: a controller
restarted after a SIGKILL cannot ``waitpid()`` the workers its predecessor started, so each
worker gets a parent that outlives the controller and writes the worker's fate to durable files
in ``D`` (the attempt's state directory):

- ``rank-R.pid``   this supervisor's pid and kernel start time (guards against pid reuse)
- ``rank-R.child`` the worker's pid and start time, written once the worker runs and signals are
  handled: the executor signals a supervisor only after this file exists ("ready")
- ``rank-R.exit``  the worker's return code (negative -N: killed by signal N), written atomically
- ``stop.json``    written by the executor: ``{"kind": "stop"|"kill"|"peer_failed", "requested_at",
  "grace_s", "term_grace_s"}``; read here on SIGUSR1/SIGUSR2 and once at start (a request may
  arrive before this process was ready)

Signals to this process: SIGUSR1 = stop gracefully (SIGUSR1 to the worker's process group, SIGTERM
``grace_s`` after the request, SIGKILL ``term_grace_s`` later); SIGUSR2 = kill the worker now;
SIGTERM/SIGINT/SIGHUP are forwarded and escalate to SIGKILL after ``term_grace_s``. The escalation
lives here, not in the controller, so it completes even if the controller dies meanwhile.

Bounds: the worker runs in a cgroup of its own (``cgroup`` names it; ``cgroup.py``) holding its
``pids_max`` and ``memory_max`` and a CPU weight, entered before it takes the job's account; when
it ends every process left in that cgroup is killed (a ``setsid`` child cannot outlive its job),
and a worker the kernel killed for memory is recorded as ``out of memory (memory.max N)``. On a
host without usable cgroups the same bounds are rlimits (``RLIMIT_AS``, ``RLIMIT_NPROC``) and
only the worker's process group is swept. ``netns`` names a network namespace (``netns.py``) the
worker joins: its rendezvous is then reachable by its own job's workers only. The log past
``log_max_bytes`` loses its oldest half (the log says so), and rank 0 fails the attempt if
``job_dir`` holds more than ``disk_max_bytes``.

``--user NAME``: the worker runs as that OS account (uid, primary gid, its groups; ``HOME``,
``USER``, ``LOGNAME``, ``SHELL`` set from the password database); this supervisor keeps its own
account (root), so the worker can neither signal it nor read its ``/proc`` entries. ``--chdir``
is entered as the worker's account, after it dropped privileges (default: the account's home, or
``/`` if it has none); if that fails the worker exits 127 with the reason in the log.
``--prefix TEXT``: the worker's stdout and stderr reach this process's stdout (the job's log)
through a pipe, ``TEXT`` at the start of every line (the executor gives ``[attempt A rank R] ``,
so the ranks and attempts of a job's one log are told apart).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import importlib.util
import json
import os
import select
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING or __package__:
    from stint.runtime.executor import cgroup as cgroups
    from stint.runtime.executor import netns as namespaces
else:  # run by path (``python -I shim.py``): the siblings are not importable by name

    def _sibling(name: str) -> ModuleType:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
        spec = importlib.util.spec_from_file_location(f"stint_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # (dataclasses look their module up by name)
        spec.loader.exec_module(module)
        return module

    cgroups = _sibling("cgroup")
    namespaces = _sibling("netns")

_PR_SET_PDEATHSIG = 1
DISK_CHECK_S = 5.0  # how often rank 0 measures its job's directory against its budget
MIN_LOG_CAP = 64 * 1024  # a smaller log cap is taken as this (room for the note and some lines)
# Errors of starting a program that may pass (the host was short of processes, memory or
# descriptors): the attempt fails as any failure does and is retried, not "cannot run" (127).
TRANSIENT_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})


def proc_start_ticks(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot), or None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def write_json_atomic(path: str, data: object) -> None:
    """Write ``data`` so that readers see either nothing or the whole file (tmp + fsync + rename)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    """The parsed file, or None if it is missing or not (yet) complete JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Account(NamedTuple):
    """An OS account a worker runs as."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str


def resolve_account(name: str) -> Account:
    """The account ``name`` from this host's password database; LookupError if there is none."""
    import pwd

    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise LookupError(f"no OS account {name!r} on this host") from None
    groups = tuple(os.getgrouplist(name, pw.pw_gid))
    return Account(name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir, pw.pw_shell or "/bin/sh")


def jobs_root(path: str, multi_user: bool) -> None:
    """Make ``path`` a directory that holds jobs' directories (created if need be): in
    multi-user mode every account may reach its own job's directory (mode 0700, its own) but list
    nothing (mode 0711); otherwise it is ours alone (0700)."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o711 if multi_user else 0o700)


def own_dir(path: str, acct: Account | None) -> None:
    """Make ``path`` a directory of ``acct`` (None: ours), mode 0700: create it, or take over an
    empty one we created; PermissionError if it is a link, not a directory, or another account's
    (the directory of a job of someone else must never be reused)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{path} is not a directory")
    me = os.geteuid()
    uid = acct.uid if acct is not None else me
    if st.st_uid != uid:
        if acct is None or st.st_uid != me or os.listdir(path):
            raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to the job's account "
                                  f"(uid {uid}): it is another job's directory")
        os.chown(path, acct.uid, acct.gid, follow_symlinks=False)
    os.chmod(path, 0o700)


def open_log(path: str, acct: Account | None) -> int:
    """An append descriptor (read-write, for the log's cap) of the log file at ``path``, owned
    by ``acct`` (None: us), mode 0600. Opened through its directory's descriptor, never following
    a link and never blocking (a FIFO planted there is refused, not waited on); refuses anything
    but a plain file of that account with one name (no hard links), so a job cannot make the
    executor write anywhere else or wait forever."""
    parent, name = os.path.split(path)
    flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    uid = acct.uid if acct is not None else os.geteuid()
    dfd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fd = os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dfd)
            if acct is not None:
                os.fchown(fd, acct.uid, acct.gid)
            os.set_blocking(fd, True)
            return fd
        except FileExistsError:
            fd = os.open(name, flags, dir_fd=dfd)
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_nlink != 1:
        os.close(fd)
        what = "a plain file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
        raise PermissionError(f"{path} is {what} of uid {st.st_uid}, not a plain file of uid "
                              f"{uid} with one name: refusing to write the job's log to it")
    os.set_blocking(fd, True)
    return fd


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a plain file"


def touch_new(path: str) -> None:
    """Create an empty file at ``path`` (mode 0644) unless something is there; never follows a
    link (for flag files in a directory the job owns)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    except FileExistsError:
        pass


def read_json_nofollow(path: str, limit: int = 1 << 20) -> Any:
    """Like ``read_json`` for a file a job wrote: no links followed, at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = f.read(limit + 1)
    try:
        return None if len(data) > limit else json.loads(data)
    except ValueError:
        return None


def tree_bytes(path: str, limit: int = 1_000_000) -> int:
    """Bytes of disk the tree at ``path`` takes (allocated blocks: a sparse file counts what it
    holds), never following a link; past ``limit`` entries the walk stops (what it saw counts)."""
    total, seen, stack = 0, 0, [path]
    while stack and seen < limit:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            seen += 1
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            total += st.st_blocks * 512
            if stat.S_ISDIR(st.st_mode):
                stack.append(e.path)
    return total


def _log(msg: str, prefix: str = "") -> None:
    sys.stderr.write(f"{prefix}[stint-shim {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def _die_with_parent() -> None:
    # In the worker (between fork and exec): if this supervisor is killed, the worker gets
    # SIGKILL instead of running on unsupervised.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class Spec:
    """What the executor hands a supervisor beside its arguments (``rank-R.spec``): the worker's
    environment and bounds (None: none), read by this process only."""

    env: dict[str, str] = field(default_factory=dict)
    memory_max: int | None = None
    pids_max: int | None = None
    cpu_weight: int = 100
    log_max_bytes: int | None = None
    disk_max_bytes: int | None = None
    job_dir: str | None = None
    cgroup: str | None = None  # the worker's cgroup's name; None: rlimits only
    netns: str | None = None  # a network namespace to run the worker in; None: the host's

    @staticmethod
    def read(path: str) -> Spec:
        rec = read_json(path)
        if not isinstance(rec, dict):
            raise OSError(f"cannot read the supervisor's spec {path}")
        return Spec(**rec)

    def bounds(self) -> cgroups.Bounds:
        return cgroups.Bounds(self.memory_max, self.pids_max, self.cpu_weight)


def _enter(cwd: str | None, acct: Account | None, cg: cgroups.WorkerCgroup | None,
           bounds: cgroups.Bounds) -> None:
    # In the worker, between fork and exec, still as root: enter its cgroup (else take its
    # bounds as rlimits), take the job's account, enter the working directory with the
    # account's rights, then arm PDEATHSIG (a change of ids clears it, so it is set last).
    if cg is not None:
        cg.join()
    else:  # RLIMIT_NPROC counts every process of the account: only for a job's own account
        cgroups.apply_rlimits(bounds if acct is not None else
                              cgroups.Bounds(bounds.memory_max, None, bounds.cpu_weight))
    if acct is not None:
        os.setgroups(list(acct.groups))
        os.setresgid(acct.gid, acct.gid, acct.gid)
        os.setresuid(acct.uid, acct.uid, acct.uid)
    if cwd is not None:
        try:
            os.chdir(cwd)
        except OSError as e:
            os.write(2, f"[stint-shim] cannot enter the working directory {cwd!r}: "
                        f"{e.strerror}\n".encode())
            os._exit(127)
    _die_with_parent()


class CappedLog:
    """Writes to the job's log (``fd``, opened with O_APPEND; other ranks' supervisors append to
    the same file) and keeps it under ``cap`` bytes: a write that would pass the cap first drops
    the oldest half of the file, from a line boundary, and puts a note in its place. Writers
    take the file's lock (flock) so that a trim never loses another rank's write."""

    def __init__(self, fd: int, cap: int | None) -> None:
        self.fd, self.cap = fd, None if cap is None else max(cap, MIN_LOG_CAP)

    def write(self, data: bytes) -> None:
        if self.cap is None:
            os.write(self.fd, data)
            return
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            if os.fstat(self.fd).st_size + len(data) > self.cap:
                self._trim()
            os.write(self.fd, data[-self.cap // 2:])
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _trim(self) -> None:
        assert self.cap is not None
        size = os.fstat(self.fd).st_size
        start = max(0, size - self.cap // 2)
        head = os.pread(self.fd, 65536, start)
        newline = head.find(b"\n")
        start += newline + 1 if newline >= 0 else 0
        note = (f"[stint] this log reached its cap of {self.cap} bytes: its oldest "
                f"{start} bytes were dropped\n").encode()
        # A second description of the same file, without O_APPEND, to move the tail down.
        rw = os.open(f"/proc/self/fd/{self.fd}", os.O_RDWR | os.O_CLOEXEC)
        try:
            os.pwrite(rw, note, 0)
            to = len(note)
            while start < size:
                chunk = os.pread(rw, min(1 << 20, size - start), start)
                if not chunk:
                    break
                os.pwrite(rw, chunk, to)
                start, to = start + len(chunk), to + len(chunk)
            os.ftruncate(rw, to)
        finally:
            os.close(rw)


class _Prefixer:
    """Copies the worker's output (a pipe) to this process's stdout (the job's log), ``prefix``
    at the start of every line, as it comes (a partial line is not held back). A write that
    fails (a full disk) drops that output: supervision goes on."""

    def __init__(self, fd: int, prefix: str, out: CappedLog) -> None:
        self.fd, self.prefix, self.out = fd, prefix.encode(), out
        self.at_start = True
        os.set_blocking(fd, False)

    def pump(self) -> bool:
        """Copy what is there; False once the pipe is closed (every writer gone)."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return True
            if not data:
                return False
            out = bytearray()
            for piece in data.splitlines(keepends=True):
                if self.at_start:
                    out += self.prefix
                out += piece
                self.at_start = piece.endswith((b"\n", b"\r"))
            try:
                self.out.write(bytes(out))
            except OSError:
                pass


class _Supervisor:
    def __init__(self, state_dir: str, rank: int, command: list[str], spec: Spec,
                 user: str | None = None, cwd: str | None = None, prefix: str = "") -> None:
        self.dir, self.rank, self.command, self.spec = state_dir, rank, command, spec
        self.user, self.cwd, self.prefix = user, cwd, prefix
        self.output: _Prefixer | None = None  # the worker's output, when lines are prefixed
        self.cgroup: cgroups.WorkerCgroup | None = None  # the worker's, when the host has them
        self.pending: list[int] = []
        self.stop_kind: str | None = None
        self.term_at: float | None = None  # when to send SIGTERM
        self.kill_at: float | None = None  # when to send SIGKILL
        self.disk_at: float | None = None  # when to measure the job's directory next
        self.error = ""  # why this supervisor ended the worker itself (a bound it passed)
        self.term_grace = 3.0
        self.pgid = 0

    def path(self, suffix: str) -> str:
        return os.path.join(self.dir, f"rank-{self.rank}.{suffix}")

    def run(self) -> int:
        me = os.getpid()
        write_json_atomic(self.path("pid"), {"pid": me, "start": proc_start_ticks(me)})
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda s, _f: self.pending.append(s))
        try:
            child = self._start()
        except (OSError, LookupError, subprocess.SubprocessError) as e:
            transient = isinstance(e, OSError) and e.errno in TRANSIENT_ERRNOS
            why = f"cannot start {self.command[0]!r}: {e}" + (" (may pass: retried)"
                                                              if transient else "")
            _log(why, self.prefix)
            self._end_cgroup()
            self._record(1 if transient else 127, why)
            return 0
        write_json_atomic(
            self.path("child"), {"pid": child.pid, "start": proc_start_ticks(child.pid)}
        )
        self.pgid = child.pid
        self._check_stop_file()  # a request that came before we were ready
        pidfd = os.pidfd_open(child.pid)
        out = self.output
        if self.rank == 0 and self.spec.disk_max_bytes is not None and self.spec.job_dir:
            self.disk_at = time.time() + DISK_CHECK_S
        while True:
            timeout = self._next_deadline()
            watched = [pidfd, wake_r] + ([out.fd] if out is not None else [])
            ready, _, _ = select.select(watched, [], [], timeout)
            if wake_r in ready:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            if out is not None and out.fd in ready and not out.pump():
                os.close(out.fd)
                out = None
            self._handle_pending()
            self._escalate()
            self._check_disk()
            if pidfd in ready:
                break
        rc = child.wait()
        self._killpg(signal.SIGKILL)  # leftovers of the worker's process group (e.g. loaders)
        oom = self._end_cgroup()  # and of its cgroup (a setsid child): none outlives it
        if out is not None:  # what they wrote last (a writer outside the group is not waited for)
            out.pump()
            os.close(out.fd)
        if oom and rc != 0 and not self.error:
            self.error = f"rank {self.rank}: " + cgroups.describe_oom(self.spec.bounds())
        self._record(rc, self.error)
        return 0

    def _start(self) -> subprocess.Popen[bytes]:
        env, cwd, acct = dict(self.spec.env), self.cwd, None  # (no STINT_SHIM_TOKEN: ours)
        if self.user is not None:
            acct = resolve_account(self.user)
            env.update(HOME=acct.home, USER=acct.name, LOGNAME=acct.name, SHELL=acct.shell)
            if cwd is None:
                cwd = acct.home if os.path.isdir(acct.home) else "/"
        bounds = self.spec.bounds()
        if self.spec.cgroup is not None:
            host = cgroups.detect()
            if host.kind != "none":
                self.cgroup = cgroups.WorkerCgroup.create(self.spec.cgroup, bounds, host)
        if self.spec.netns is not None:
            namespaces.join(self.spec.netns)  # this process's only: the worker starts in it
        log = CappedLog(1, self.spec.log_max_bytes)
        write = None
        if self.prefix:
            read, write = os.pipe()
            self.output = _Prefixer(read, self.prefix, log)
        cg = self.cgroup
        # preexec_fn is safe here: this process has a single thread.
        try:
            return subprocess.Popen(
                self.command,
                start_new_session=True,
                env=env,
                preexec_fn=lambda: _enter(cwd, acct, cg, bounds),  # noqa: PLW1509
                stdout=write,
                stderr=subprocess.STDOUT if write is not None else None,
            )
        finally:
            if write is not None:
                os.close(write)

    def _end_cgroup(self) -> int:
        """Kill what is left in the worker's cgroup and remove it; the kernel's OOM kills in it."""
        if self.cgroup is None:
            return 0
        self.cgroup.kill_all()
        oom = self.cgroup.oom_kills()
        self.cgroup.remove()
        return oom

    def _check_disk(self) -> None:
        """Rank 0: end the worker if the job's directory holds more than its budget."""
        budget, job_dir = self.spec.disk_max_bytes, self.spec.job_dir
        if self.disk_at is None or time.time() < self.disk_at or budget is None or not job_dir:
            return
        self.disk_at = time.time() + DISK_CHECK_S
        used = tree_bytes(job_dir)
        if used > budget and not self.error:
            self.error = (f"rank {self.rank}: disk budget exceeded: the job's directory holds "
                          f"{used} bytes, more than its {budget}")
            _log(f"{self.error}; SIGKILL to the worker", self.prefix)
            self._killpg(signal.SIGKILL)
            if self.cgroup is not None:
                self.cgroup.kill_all()
            self.disk_at = None

    def _next_deadline(self) -> float | None:
        times = [t for t in (self.term_at, self.kill_at, self.disk_at) if t is not None]
        return max(0.0, min(times) - time.time()) if times else None

    def _check_stop_file(self, signalled: int | None = None) -> None:
        """Act on stop.json; a signal without the file means a stop (USR1) or kill (USR2) now."""
        stop = read_json(os.path.join(self.dir, "stop.json"))
        if stop is None and signalled is not None:
            kind = "kill" if signalled == signal.SIGUSR2 else "stop"
            stop = {"kind": kind, "requested_at": time.time(), "grace_s": 30.0, "term_grace_s": 3.0}
        if stop is None or stop.get("kind") == self.stop_kind:
            return
        self.stop_kind = stop["kind"]
        if stop["kind"] == "stop":
            _log(f"stop requested: SIGUSR1 to the worker, SIGTERM after {stop['grace_s']}s", self.prefix)
            self._killpg(signal.SIGUSR1)
            self.term_at = float(stop["requested_at"]) + float(stop["grace_s"])
            self.term_grace = float(stop["term_grace_s"])
        else:
            _log(f"{stop['kind']}: SIGKILL to the worker", self.prefix)
            self._killpg(signal.SIGKILL)
            self.term_at = None

    def _handle_pending(self) -> None:
        while self.pending:
            sig = self.pending.pop(0)
            if sig in (signal.SIGUSR1, signal.SIGUSR2):
                self._check_stop_file(sig)
            else:  # someone is terminating the supervisor itself: pass it on, then make sure
                self._killpg(sig)
                self.kill_at = time.time() + 3.0

    def _escalate(self) -> None:
        now = time.time()
        if self.term_at is not None and now >= self.term_at:
            _log(f"grace period over: SIGTERM to the worker, SIGKILL after {self.term_grace}s", self.prefix)
            self._killpg(signal.SIGTERM)
            self.term_at = None
            self.kill_at = now + self.term_grace
        if self.kill_at is not None and now >= self.kill_at:
            _log("worker still alive: SIGKILL", self.prefix)
            self._killpg(signal.SIGKILL)
            self.kill_at = None

    def _killpg(self, sig: int) -> None:
        if not self.pgid:
            return
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _record(self, returncode: int, error: str) -> None:
        """Write the exit record; while that fails (a full disk) stay alive and retry, so the
        executor sees a live rank instead of a lost one and the real code is never lost."""
        rec = {"returncode": returncode, "ended_at": time.time(), "error": error}
        wait = 0.5
        while True:
            try:
                write_json_atomic(self.path("exit"), rec)
                return
            except OSError as e:
                try:
                    os.unlink(f"{self.path('exit')}.tmp{os.getpid()}")
                except OSError:
                    pass
                try:
                    _log(f"cannot record the worker's exit code {returncode} ({e}); retrying", self.prefix)
                except OSError:
                    pass
                time.sleep(wait)
                wait = min(10.0, wait * 2)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--die-with-parent"]:
        # Under a Ray actor: if the actor dies, so do we (and so, in turn, the worker).
        parent = int(argv[1])
        _die_with_parent()
        if os.getppid() != parent:  # it died before prctl took effect
            return 1
        argv = argv[2:]
    opts: dict[str, str] = {}
    while len(argv) >= 2 and argv[0] in ("--dir", "--rank", "--spec", "--user", "--chdir",
                                         "--prefix"):
        opts[argv[0][2:]] = argv[1]
        argv = argv[2:]
    if ("dir" not in opts or "rank" not in opts or "spec" not in opts or argv[:1] != ["--"]
            or len(argv) < 2):
        sys.stderr.write("usage: shim.py [--die-with-parent PID] --dir STATE_DIR --rank R "
                         "--spec FILE [--user NAME] [--chdir DIR] [--prefix TEXT] -- COMMAND...\n")
        return 2
    return _Supervisor(opts["dir"], int(opts["rank"]), argv[1:], Spec.read(opts["spec"]),
                       opts.get("user"), opts.get("chdir"), opts.get("prefix", "")).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
