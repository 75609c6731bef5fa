"""The supervisor of one worker process: run it, relay stop requests, record how it ended.

Run by file path (``python shim.py --dir D --rank R [--user NAME] [--chdir DIR] [--prefix TEXT]
-- COMMAND...``)
so that it imports only the
standard library and starts fast. Why it exists: a controller restarted after a SIGKILL cannot
``waitpid()`` the workers its predecessor started, so each worker gets a parent that outlives the
controller and writes the worker's fate to durable files in ``D`` (the attempt's state directory):

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
import json
import os
import select
import signal
import stat
import subprocess
import sys
import time
from typing import Any, NamedTuple

_PR_SET_PDEATHSIG = 1


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
    """A write-only append descriptor of the log file at ``path``, owned by ``acct`` (None: us),
    mode 0600. Never follows a link and refuses a file of another account or with other names
    (hard links), so a job cannot make the executor write anywhere else."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    uid = acct.uid if acct is not None else os.geteuid()
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        if acct is not None:
            os.fchown(fd, acct.uid, acct.gid)
        return fd
    except FileExistsError:
        fd = os.open(path, flags)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_nlink != 1:
        os.close(fd)
        raise PermissionError(f"{path}: not a plain file of uid {uid} (refusing to write to it)")
    return fd


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


def _log(msg: str, prefix: str = "") -> None:
    sys.stderr.write(f"{prefix}[stint-shim {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def _die_with_parent() -> None:
    # In the worker (between fork and exec): if this supervisor is killed, the worker gets
    # SIGKILL instead of running on unsupervised.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _enter(cwd: str | None) -> None:
    # In the worker, after it took its account's ids (subprocess switches them before calling
    # preexec_fn): enter the working directory with the account's rights, then arm PDEATHSIG
    # (a change of ids clears it, so it is set last).
    if cwd is not None:
        try:
            os.chdir(cwd)
        except OSError as e:
            os.write(2, f"[stint-shim] cannot enter the working directory {cwd!r}: "
                        f"{e.strerror}\n".encode())
            os._exit(127)
    _die_with_parent()


class _Prefixer:
    """Copies the worker's output (a pipe) to this process's stdout (the job's log), ``prefix``
    at the start of every line, as it comes (a partial line is not held back). A write that
    fails (a full disk) drops that output: supervision goes on."""

    def __init__(self, fd: int, prefix: str, out: int = 1) -> None:
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
                os.write(self.out, out)
            except OSError:
                pass


class _Supervisor:
    def __init__(self, state_dir: str, rank: int, command: list[str], user: str | None = None,
                 cwd: str | None = None, prefix: str = "") -> None:
        self.dir, self.rank, self.command = state_dir, rank, command
        self.user, self.cwd, self.prefix = user, cwd, prefix
        self.output: _Prefixer | None = None  # the worker's output, when lines are prefixed
        self.pending: list[int] = []
        self.stop_kind: str | None = None
        self.term_at: float | None = None  # when to send SIGTERM
        self.kill_at: float | None = None  # when to send SIGKILL
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
            _log(f"cannot start {self.command[0]!r}: {e}", self.prefix)
            self._record(127, f"cannot start {self.command[0]!r}: {e}")
            return 0
        write_json_atomic(
            self.path("child"), {"pid": child.pid, "start": proc_start_ticks(child.pid)}
        )
        self.pgid = child.pid
        self._check_stop_file()  # a request that came before we were ready
        pidfd = os.pidfd_open(child.pid)
        out = self.output
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
            if pidfd in ready:
                break
        rc = child.wait()
        self._killpg(signal.SIGKILL)  # leftovers of the worker's process group (e.g. loaders)
        if out is not None:  # what they wrote last (a writer outside the group is not waited for)
            out.pump()
            os.close(out.fd)
        self._record(rc, "")
        return 0

    def _start(self) -> subprocess.Popen[bytes]:
        env, cwd = dict(os.environ), self.cwd
        env.pop("STINT_SHIM_TOKEN", None)  # names this supervisor (for adoption), not the job
        uid = gid = groups = None
        if self.user is not None:
            acct = resolve_account(self.user)
            env.update(HOME=acct.home, USER=acct.name, LOGNAME=acct.name, SHELL=acct.shell)
            if cwd is None:
                cwd = acct.home if os.path.isdir(acct.home) else "/"
            uid, gid, groups = acct.uid, acct.gid, list(acct.groups)
        write = None
        if self.prefix:
            read, write = os.pipe()
            self.output = _Prefixer(read, self.prefix)
        # preexec_fn is safe here: this process has a single thread.
        try:
            return subprocess.Popen(
                self.command,
                start_new_session=True,
                env=env,
                preexec_fn=lambda: _enter(cwd),  # noqa: PLW1509
                user=uid,
                group=gid,
                extra_groups=groups,
                stdout=write,
                stderr=subprocess.STDOUT if write is not None else None,
            )
        finally:
            if write is not None:
                os.close(write)

    def _next_deadline(self) -> float | None:
        times = [t for t in (self.term_at, self.kill_at) if t is not None]
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
    while len(argv) >= 2 and argv[0] in ("--dir", "--rank", "--user", "--chdir", "--prefix"):
        opts[argv[0][2:]] = argv[1]
        argv = argv[2:]
    if "dir" not in opts or "rank" not in opts or argv[:1] != ["--"] or len(argv) < 2:
        sys.stderr.write("usage: shim.py [--die-with-parent PID] --dir STATE_DIR --rank R "
                         "[--user NAME] [--chdir DIR] [--prefix TEXT] -- COMMAND...\n")
        return 2
    return _Supervisor(opts["dir"], int(opts["rank"]), argv[1:], opts.get("user"),
                       opts.get("chdir"), opts.get("prefix", "")).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
