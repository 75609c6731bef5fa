"""The supervisor of one worker process: run it, relay stop requests, record how it ended.

Run by file path (``python shim.py --dir D --rank R -- COMMAND...``) so that it imports only the
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
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

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


def _log(msg: str) -> None:
    sys.stderr.write(f"[stint-shim {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def _die_with_parent() -> None:
    # In the worker (between fork and exec): if this supervisor is killed, the worker gets
    # SIGKILL instead of running on unsupervised.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _Supervisor:
    def __init__(self, state_dir: str, rank: int, command: list[str]) -> None:
        self.dir, self.rank, self.command = state_dir, rank, command
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
            # preexec_fn is safe here: this process has a single thread.
            child = subprocess.Popen(
                self.command,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        except OSError as e:
            _log(f"cannot start {self.command[0]!r}: {e}")
            self._record(127, f"cannot start {self.command[0]!r}: {e}")
            return 0
        write_json_atomic(
            self.path("child"), {"pid": child.pid, "start": proc_start_ticks(child.pid)}
        )
        self.pgid = child.pid
        self._check_stop_file()  # a request that came before we were ready
        pidfd = os.pidfd_open(child.pid)
        while True:
            timeout = self._next_deadline()
            ready, _, _ = select.select([pidfd, wake_r], [], [], timeout)
            if wake_r in ready:
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            self._handle_pending()
            self._escalate()
            if pidfd in ready:
                break
        rc = child.wait()
        self._killpg(signal.SIGKILL)  # leftovers of the worker's process group (e.g. loaders)
        self._record(rc, "")
        return 0

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
            _log(f"stop requested: SIGUSR1 to the worker, SIGTERM after {stop['grace_s']}s")
            self._killpg(signal.SIGUSR1)
            self.term_at = float(stop["requested_at"]) + float(stop["grace_s"])
            self.term_grace = float(stop["term_grace_s"])
        else:
            _log(f"{stop['kind']}: SIGKILL to the worker")
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
            _log(f"grace period over: SIGTERM to the worker, SIGKILL after {self.term_grace}s")
            self._killpg(signal.SIGTERM)
            self.term_at = None
            self.kill_at = now + self.term_grace
        if self.kill_at is not None and now >= self.kill_at:
            _log("worker still alive: SIGKILL")
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
        write_json_atomic(
            self.path("exit"),
            {"returncode": returncode, "ended_at": time.time(), "error": error},
        )


def main(argv: list[str]) -> int:
    if argv[:1] == ["--die-with-parent"]:
        # Under a Ray actor: if the actor dies, so do we (and so, in turn, the worker).
        parent = int(argv[1])
        _die_with_parent()
        if os.getppid() != parent:  # it died before prctl took effect
            return 1
        argv = argv[2:]
    if len(argv) < 6 or argv[0] != "--dir" or argv[2] != "--rank" or argv[4] != "--":
        sys.stderr.write(
            "usage: shim.py [--die-with-parent PID] --dir STATE_DIR --rank R -- COMMAND...\n"
        )
        return 2
    return _Supervisor(argv[1], int(argv[3]), argv[5:]).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
