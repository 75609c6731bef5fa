"""What the local and Ray executors share: durable per-attempt state and the outcome rules.

Every worker runs under a supervisor (``shim.py``) that records its fate in files, so the whole
state of the executor lives on disk and a new executor object re-adopts what an old one started.
Layout under ``state_dir``:

    id                              random id of this state directory (part of the worker token)
    active/<job>@<attempt>          attempts launched and not yet reported by poll
    jobs/<job>/status.json          the SDK's progress report (STINT_STATUS_FILE); with a
                                    ``job_dir`` it is ``<job_dir>/status.json`` instead, and
                                    ``<job_dir>/stop-<attempt>`` is STINT_STOP_FILE
    jobs/<job>/<attempt>/launch.json    the workers, master port and launch time
    jobs/<job>/<attempt>/stop.json      stop request: kind, time, grace (see shim.py)
    jobs/<job>/<attempt>/rank-R.{pid,child,exit}   written by the supervisor of rank R
    jobs/<job>/<attempt>/exit.json      the attempt's JobExit, once every rank has ended
    jobs/<job>/<attempt>/reported       poll() has returned that exit

A backend (local processes, Ray actors) supplies only: spawning a supervisor, telling whether a
rank's supervisor is alive, delivering a signal to it, and releasing an ended attempt.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import socket
import stat
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stint.ports import PortRange, pick_port
from stint.runtime.executor.base import (
    DEFAULT_GRACE_S,
    EXIT_CHECKPOINTED,
    SAFE_ID,
    TERM_GRACE_S,
    ExecutorError,
    JobExit,
    LaunchError,
    NodeInfo,
    Outcome,
    WorkerLaunch,
)
from stint.runtime.executor.shim import (
    TRANSIENT_ERRNOS,
    Account,
    own_dir,
    read_json,
    read_json_nofollow,
    resolve_account,
    touch_new,
    write_json_atomic,
)

SHIM_PATH = str(Path(__file__).with_name("shim.py"))
# The supervisor's own environment, whatever the job's (it runs as root in multi-user mode, and
# ``python -I`` alone does not stop a loader variable such as LD_PRELOAD): the job's variables
# reach only the worker, through the spec file, after it took the job's account.
SUPERVISOR_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                  "LANG": "C.UTF-8"}
PENDING_TIMEOUT_S = 60.0  # a rank with no supervisor this long after launch was never started
LOST_RETURNCODE = -int(signal.SIGKILL)
# What a worker's fresh environment takes from the executor's: nothing secret, only what finds
# programs, libraries and devices and how text is shown.
PASSED_VARS = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ",
                         "TERM", "LD_LIBRARY_PATH"})
PASSED_PREFIXES = ("LC_", "CUDA_", "NCCL_", "NVIDIA_")


@dataclass(frozen=True, slots=True)
class RankState:
    """One rank of an attempt as seen now: 'alive', 'pending' (starting), 'exited' or 'lost'."""

    rank: int
    state: str
    returncode: int | None = None
    error: str = ""
    ended_at: float = 0.0


class SupervisedExecutor(ABC):
    """The Executor protocol over durable supervisor state; subclasses supply a backend."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        nodes: Sequence[NodeInfo],
        term_grace_s: float = TERM_GRACE_S,
        ports: PortRange | None = None,
    ) -> None:
        self.term_grace_s = term_grace_s  # SIGTERM -> SIGKILL, after the stop's own grace period
        self.ports = ports  # the attempts' rendezvous ports (None: any, see _free_port)
        self.root = Path(state_dir).resolve()
        (self.root / "active").mkdir(parents=True, exist_ok=True)
        (self.root / "jobs").mkdir(exist_ok=True)
        os.chmod(self.root, 0o700)  # the supervisors' state is the executor's alone
        id_file = self.root / "id"
        if not id_file.exists():
            write_json_atomic(str(id_file), uuid.uuid4().hex[:12])
        self.sid: str = str(read_json(str(id_file)))
        self._nodes = {n.name: n for n in nodes}
        self._lock = threading.RLock()
        self._launches: dict[tuple[str, int], list[WorkerLaunch]] = {}

    # ---- backend ------------------------------------------------------------------------------
    @abstractmethod
    def _spawn(self, w: WorkerLaunch, env: dict[str, str], attempt_dir: Path) -> None:
        """Start the supervisor of ``w`` (stdout+stderr to ``w.log_path``, opened with
        ``shim.open_log`` for ``w.os_user``; its arguments from ``shim_args``)."""

    @abstractmethod
    def _is_alive(self, w: WorkerLaunch, attempt_dir: Path, launched_at: float) -> bool | None:
        """Whether the rank's supervisor runs now; None if it has not started yet (pending)."""

    @abstractmethod
    def _signal(self, w: WorkerLaunch, attempt_dir: Path, sig: int) -> None:
        """Deliver ``sig`` to the rank's supervisor if it is alive (never raises if it is gone)."""

    def _release(self, job_id: str, attempt: int) -> None:
        """Free whatever the backend holds for an ended and reported attempt."""

    def _reap(self) -> None:
        """Collect exited children of this object (zombies), if the backend has any."""

    # ---- Executor protocol --------------------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes.values())

    def down_nodes(self) -> frozenset[str]:
        return frozenset()  # a supervised attempt that loses its node is reported by poll

    def launch(self, workers: Sequence[WorkerLaunch]) -> None:
        ws = self._check_gang(workers)
        job, attempt = ws[0].job_id, ws[0].attempt
        with self._lock:
            d = self._dir(job, attempt)
            rec = read_json(str(d / "launch.json"))
            fresh = rec is None
            if rec is None:
                self._check_free(job, attempt, ws)
                d.mkdir(parents=True, exist_ok=True)
                rec = {
                    "workers": [_to_json(w) for w in ws],
                    "master_port": self._master_port(),
                    "launched_at": time.time(),
                }
                write_json_atomic(str(d / "launch.json"), rec)
            elif rec["workers"] != [_to_json(w) for w in ws]:
                raise ExecutorError(
                    f"job {job!r} attempt {attempt} was already launched with different workers; "
                    "a changed allocation needs a new attempt number"
                )
            if not (d / "reported").exists():  # also heals a crash right after launch.json
                (self.root / "active" / f"{job}@{attempt}").touch()
            if (d / "exit.json").exists():
                return
            self._launches[(job, attempt)] = ws
            self._prepare(ws)
            for w in ws:
                started = _exists(d, w.rank, "pid") or _exists(d, w.rank, "exit")
                # Relaunch after a crash: a supervisor may have started just before it.
                if not started and (fresh or not self._adopt_orphan(w, d)):
                    self._spawn_or_fail(w, ws, self._env(w, ws, rec["master_port"], d), d)

    def _master_port(self) -> int:
        """A new attempt's rendezvous port: one of ``ports`` that is free and not given to
        another live attempt (whose rank 0 may not listen yet), else any (``_free_port``). A
        range all in use refuses the launch for now (the controller retries it)."""
        if self.ports is None:
            return _free_port()
        given = set()
        for job, attempt in self._active():
            rec = read_json(str(self._dir(job, attempt) / "launch.json"))
            if isinstance(rec, dict) and isinstance(rec.get("master_port"), int):
                given.add(rec["master_port"])
        try:
            return pick_port(self.ports, avoid=given)
        except OSError as e:
            raise LaunchError(f"rendezvous port: {e}", transient=True) from None

    def _prepare(self, ws: list[WorkerLaunch]) -> None:
        """Give the job's directory to its account (LaunchError if that cannot be done)."""
        w = ws[0]
        try:
            acct = resolve_account(w.os_user) if w.os_user is not None else None
            if w.job_dir is not None:
                own_dir(w.job_dir, acct)
        except (LookupError, OSError) as exc:
            raise LaunchError(f"job {w.job_id!r} attempt {w.attempt}: {exc}") from None

    def _spawn_or_fail(self, w: WorkerLaunch, ws: list[WorkerLaunch], env: dict[str, str],
                       d: Path) -> None:
        """Spawn ``w``'s supervisor; if the OS refuses, record the ranks not yet started as exited
        127, kill the rest and raise LaunchError: transient if the host was short of processes,
        memory or descriptors (it may pass), else permanent (e.g. arguments beyond its limit)."""
        try:
            self._spawn(w, env, d)
        except (OSError, LookupError) as exc:
            transient = isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS
            why = f"rank {w.rank}: cannot start its supervisor: {exc}"
            for x in ws:
                if not (_exists(d, x.rank, "pid") or _exists(d, x.rank, "exit")):
                    write_json_atomic(str(d / f"rank-{x.rank}.exit"),
                                      {"returncode": 127, "ended_at": time.time(), "error": why})
            self._stop(w.job_id, "peer_failed", 0.0, signal.SIGUSR2, why)  # FAILED: why
            raise LaunchError(f"job {w.job_id!r} attempt {w.attempt}: {why}",
                              transient) from None

    def request_stop(self, job_id: str, grace_s: float = DEFAULT_GRACE_S) -> None:
        self._stop(job_id, "stop", grace_s, signal.SIGUSR1, f"stop requested (grace {grace_s}s)")

    def kill(self, job_id: str) -> None:
        self._stop(job_id, "kill", 0.0, signal.SIGUSR2, "kill requested")

    def poll(self) -> list[JobExit]:
        out: list[JobExit] = []
        with self._lock:
            self._reap()
            for job, attempt in self._active():
                d = self._dir(job, attempt)
                ex = self.exit_of(job, attempt)
                if ex is None:
                    ex = self._try_finish(job, attempt, d)
                    if ex is None:
                        continue
                if not (d / "reported").exists():
                    out.append(ex)
                    (d / "reported").touch()
                (self.root / "active" / f"{job}@{attempt}").unlink(missing_ok=True)
                self._launches.pop((job, attempt), None)
                self._release(job, attempt)
        out.sort(key=lambda e: e.ended_at)
        return out

    def running(self) -> dict[str, int]:
        alive: dict[str, int] = {}
        with self._lock:
            for job, attempt in self._active():
                d = self._dir(job, attempt)
                if (d / "exit.json").exists():
                    continue
                states = self._probe(job, attempt, d)
                if any(s.state in ("alive", "pending") for s in states):
                    alive[job] = attempt
        return alive

    def exit_of(self, job_id: str, attempt: int) -> JobExit | None:
        rec = read_json(str(self._dir(job_id, attempt) / "exit.json"))
        if rec is None:
            return None
        return JobExit(
            job_id=rec["job_id"],
            attempt=rec["attempt"],
            outcome=Outcome(rec["outcome"]),
            exit_codes={int(r): c for r, c in rec["exit_codes"].items()},
            reason=rec["reason"],
            ended_at=rec["ended_at"],
        )

    def status(self, job_id: str) -> Mapping[str, Any] | None:
        """The SDK's last report, with ``heartbeat_at`` (the time the job last touched
        ``STINT_HEARTBEAT_FILE``) when that file exists; None if there is neither."""
        shared = self._shared_dir(job_id)
        rec = read_json_nofollow(str(shared / "status.json"))
        beat = _mtime(shared / "heartbeat")
        out = dict(rec) if isinstance(rec, dict) else None
        if beat is not None:
            out = {**(out or {}), "heartbeat_at": beat}
        return out

    def _shared_dir(self, job_id: str) -> Path:
        """Where the job's status and heartbeat files are: its directory, else our state."""
        attempts = sorted(int(p.name) for p in self._job_dir(job_id).glob("[0-9]*"))
        ws = self._workers(job_id, attempts[-1]) if attempts else []
        if ws and ws[0].job_dir is not None:
            return Path(ws[0].job_dir)
        return self._job_dir(job_id)

    @staticmethod
    def shim_args(w: WorkerLaunch, attempt_dir: Path) -> list[str]:
        """The supervisor's arguments for ``w`` (after the path of shim.py)."""
        args = ["--dir", str(attempt_dir), "--rank", str(w.rank),
                "--spec", str(spec_path(attempt_dir, w.rank)),
                "--prefix", f"[attempt {w.attempt} rank {w.rank}] "]
        if w.os_user is not None:
            args += ["--user", w.os_user]
        if w.cwd is not None:
            args += ["--chdir", w.cwd]
        return [*args, "--", *w.command]

    def spec(self, w: WorkerLaunch, env: Mapping[str, str]) -> dict[str, Any]:
        """The record of ``shim.Spec`` for ``w`` with the worker environment ``env``: its bounds,
        its cgroup's name and (``_netns``) its network namespace."""
        return {"env": dict(env), "memory_max": w.memory_max, "pids_max": w.pids_max,
                "cpu_weight": 100 * max(1, len(w.slots)), "log_max_bytes": w.log_max_bytes,
                "disk_max_bytes": w.disk_max_bytes, "job_dir": w.job_dir,
                "cgroup": self.cgroup_name(w.job_id, w.attempt, w.rank),
                "netns": self._netns(w)}

    def cgroup_name(self, job_id: str, attempt: int, rank: int) -> str:
        """The name of the cgroup of that worker (``cgroup.WorkerCgroup``)."""
        return f"{self.sid}-{job_id}-{attempt}-{rank}"

    def supervisor_env(self, w: WorkerLaunch) -> dict[str, str]:
        """The supervisor's own environment: fixed, and the token that names it for adoption."""
        return {**SUPERVISOR_ENV, "STINT_SHIM_TOKEN": self._token(w)}

    def _netns(self, w: WorkerLaunch) -> str | None:
        """Hook: the network namespace the attempt of ``w`` runs in (None: the host's)."""
        return None

    @staticmethod
    def account(w: WorkerLaunch) -> Account | None:
        return resolve_account(w.os_user) if w.os_user is not None else None

    def close(self) -> None:
        self._launches.clear()

    def log_paths(self, job_id: str) -> list[str]:
        """Distinct log files of the job's latest launched attempt (for ``stint logs``)."""
        attempts = sorted(int(p.name) for p in self._job_dir(job_id).glob("[0-9]*"))
        if not attempts:
            return []
        return sorted({w.log_path for w in self._workers(job_id, attempts[-1])})

    # ---- internals ----------------------------------------------------------------------------
    def _job_dir(self, job_id: str) -> Path:
        if not isinstance(job_id, str) or not SAFE_ID.match(job_id):
            raise ExecutorError(f"job_id {job_id!r} must match {SAFE_ID.pattern}")
        return self.root / "jobs" / job_id

    def _dir(self, job_id: str, attempt: int) -> Path:
        return self._job_dir(job_id) / str(int(attempt))

    def _active(self) -> list[tuple[str, int]]:
        out = []
        for p in (self.root / "active").iterdir():
            job, _, attempt = p.name.rpartition("@")
            out.append((job, int(attempt)))
        return sorted(out)

    def _workers(self, job_id: str, attempt: int) -> list[WorkerLaunch]:
        ws = self._launches.get((job_id, attempt))
        if ws is None:
            rec = read_json(str(self._dir(job_id, attempt) / "launch.json"))
            ws = [_from_json(x) for x in rec["workers"]] if rec else []
            self._launches[(job_id, attempt)] = ws
        return ws

    def _check_gang(self, workers: Sequence[WorkerLaunch]) -> list[WorkerLaunch]:
        ws = sorted(workers, key=lambda w: w.rank)
        if not ws:
            raise ExecutorError("launch needs at least one worker")
        first = ws[0]
        where = f"launch of job {first.job_id!r} attempt {first.attempt}"
        for w in ws:
            if (w.job_id, w.attempt, w.world_size, w.logical_world_size) != (
                first.job_id,
                first.attempt,
                first.world_size,
                first.logical_world_size,
            ):
                raise ExecutorError(
                    f"{where}: rank {w.rank} differs in job_id/attempt/world_size/logical_world_size"
                )
            node = self._nodes.get(w.node)
            if node is None:
                raise ExecutorError(f"{where}: rank {w.rank}: unknown node {w.node!r}")
            if any(s >= node.slots for s in w.slots):
                raise ExecutorError(
                    f"{where}: rank {w.rank}: slots {list(w.slots)} outside node {w.node!r} "
                    f"(slots 0..{node.slots - 1})"
                )
        if [w.rank for w in ws] != list(range(first.world_size)):
            raise ExecutorError(f"{where}: ranks must be exactly 0..{first.world_size - 1}")
        used = [(w.node, s) for w in ws for s in w.slots]
        if len(used) != len(set(used)):
            raise ExecutorError(f"{where}: two ranks share an accelerator slot")
        return ws

    def _check_free(self, job: str, attempt: int, ws: list[WorkerLaunch]) -> None:
        """Refuse a second live attempt of ``job`` and slots held by a live worker of another job."""
        wanted = {(w.node, s) for w in ws for s in w.slots}
        for other_job, other_attempt in self._active():
            d = self._dir(other_job, other_attempt)
            if (d / "exit.json").exists():
                continue
            states = self._probe(other_job, other_attempt, d)
            live = {s.rank for s in states if s.state in ("alive", "pending")}
            if not live:
                continue
            if other_job == job and other_attempt != attempt:
                raise ExecutorError(
                    f"job {job!r}: attempt {other_attempt} is still running; stop it and wait for "
                    f"poll() to report its exit before launching attempt {attempt}"
                )
            held = {
                (w.node, s)
                for w in self._workers(other_job, other_attempt)
                if w.rank in live
                for s in w.slots
            }
            clash = sorted(wanted & held)
            if clash:
                raise ExecutorError(
                    f"job {job!r} attempt {attempt}: slots {clash} are held by a live worker of "
                    f"job {other_job!r} attempt {other_attempt}"
                )

    def _env(self, w: WorkerLaunch, ws: list[WorkerLaunch], port: int, d: Path) -> dict[str, str]:
        local_rank = [x.rank for x in ws if x.node == w.node].index(w.rank)
        env = worker_base_env(os.environ)
        shared = Path(w.job_dir) if w.job_dir is not None else None
        env.update(
            STINT_JOB_ID=w.job_id,
            STINT_ATTEMPT=str(w.attempt),
            STINT_RANK=str(w.rank),
            STINT_WORLD_SIZE=str(w.world_size),
            STINT_LOGICAL_WORLD_SIZE=str(w.logical_world_size),
            STINT_CKPT_DIR=w.ckpt_dir,
            STINT_MASTER_ADDR="127.0.0.1",
            STINT_MASTER_PORT=str(port),
            STINT_STATUS_FILE=str(shared / "status.json") if shared else
            str(self.root / "jobs" / w.job_id / "status.json"),
            STINT_STOP_FILE=str(shared / f"stop-{w.attempt}") if shared else str(d / "stop.json"),
            STINT_HEARTBEAT_FILE=str((shared or self.root / "jobs" / w.job_id) / "heartbeat"),
            STINT_NODE=w.node,
            RANK=str(w.rank),
            WORLD_SIZE=str(w.world_size),
            LOCAL_RANK=str(local_rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            CUDA_VISIBLE_DEVICES=",".join(str(s) for s in w.slots),
        )
        env.update(w.env)
        return env

    def _token(self, w: WorkerLaunch) -> str:
        return f"{self.sid}/{w.job_id}/{w.attempt}/{w.rank}"

    def _adopt_orphan(self, w: WorkerLaunch, d: Path) -> bool:
        """Hook: find a supervisor started just before a crash, before its pid file was written."""
        return False

    def _alive_many(
        self, ws: Sequence[WorkerLaunch], d: Path, launched_at: float
    ) -> dict[int, bool | None]:
        """``_is_alive`` for several ranks of one attempt (a backend may batch the queries)."""
        return {w.rank: self._is_alive(w, d, launched_at) for w in ws}

    def _probe(self, job: str, attempt: int, d: Path) -> list[RankState]:
        rec = read_json(str(d / "launch.json")) or {}
        launched_at = float(rec.get("launched_at", 0.0))
        ws = self._workers(job, attempt)
        exits = {w.rank: read_json(str(d / f"rank-{w.rank}.exit")) for w in ws}
        alive = self._alive_many([w for w in ws if exits[w.rank] is None], d, launched_at)
        return [self._rank_state(w, d, exits[w.rank], alive.get(w.rank)) for w in ws]

    def _rank_state(
        self, w: WorkerLaunch, d: Path, ex: dict[str, Any] | None, alive: bool | None
    ) -> RankState:
        if ex is None:
            if alive is None:
                return RankState(w.rank, "pending")
            if alive:
                return RankState(w.rank, "alive")
            ex = read_json(str(d / f"rank-{w.rank}.exit"))  # it may have exited just now
            if ex is None:
                return RankState(w.rank, "lost", LOST_RETURNCODE, self._lost_reason(w, d))
        return RankState(w.rank, "exited", ex["returncode"], ex.get("error", ""), ex["ended_at"])

    def _lost_reason(self, w: WorkerLaunch, d: Path) -> str:
        if not _exists(d, w.rank, "pid"):
            return f"rank {w.rank} was never started (launch interrupted)"
        return f"rank {w.rank}: its supervisor died without recording the worker's exit"

    def _try_finish(self, job: str, attempt: int, d: Path) -> JobExit | None:
        """The attempt's JobExit if every rank has ended (written to exit.json), else None."""
        states = self._probe(job, attempt, d)
        stop = read_json(str(d / "stop.json"))
        live = [s for s in states if s.state in ("alive", "pending")]
        if live:
            bad = [s for s in states if s.state == "lost" or _failed(s.returncode)]
            if bad and stop is None:  # one worker failed: the gang cannot go on, stop the rest
                reason = _describe_failure(bad[0])
                self._write_stop(d, "peer_failed", 0.0, reason)
                for w in self._workers(job, attempt):
                    self._signal(w, d, signal.SIGUSR2)
            return None
        for s in states:
            if s.state == "lost":  # record it so that the outcome never changes later
                write_json_atomic(
                    str(d / f"rank-{s.rank}.exit"),
                    {"returncode": s.returncode, "ended_at": time.time(), "error": s.error},
                )
        outcome, reason = decide(states, stop)
        ex = JobExit(
            job_id=job,
            attempt=attempt,
            outcome=outcome,
            exit_codes={s.rank: int(s.returncode or 0) for s in states},
            reason=reason,
            ended_at=max((s.ended_at for s in states), default=0.0) or time.time(),
        )
        rec = dataclasses.asdict(ex)
        rec["exit_codes"] = {str(r): c for r, c in ex.exit_codes.items()}
        write_json_atomic(str(d / "exit.json"), rec)
        return ex

    def _stop(self, job_id: str, kind: str, grace_s: float, sig: int, reason: str) -> None:
        with self._lock:
            for job, attempt in self._active():
                d = self._dir(job, attempt)
                if job != job_id or (d / "exit.json").exists():
                    continue
                prev = read_json(str(d / "stop.json"))
                if prev is None or (kind == "kill" and prev["kind"] != "kill"):
                    self._write_stop(d, kind, grace_s, reason)
                # Signal only ready supervisors; one that is still starting reads stop.json itself.
                for w in self._workers(job, attempt):
                    if _exists(d, w.rank, "child"):
                        self._signal(w, d, sig)

    def _write_stop(self, d: Path, kind: str, grace_s: float, reason: str) -> None:
        rec = read_json(str(d / "launch.json")) or {}
        first = rec.get("workers", [{}])[0]
        if first.get("job_dir"):  # the job's view of the request (it cannot read ours)
            try:
                touch_new(str(Path(first["job_dir"]) / f"stop-{first['attempt']}"))
            except OSError:
                pass  # SIGUSR1 still carries the request
        write_json_atomic(
            str(d / "stop.json"),
            {
                "kind": kind,
                "requested_at": time.time(),
                "grace_s": grace_s,
                "term_grace_s": self.term_grace_s,
                "reason": reason,
            },
        )


def decide(states: Sequence[RankState], stop: Mapping[str, Any] | None) -> tuple[Outcome, str]:
    """The outcome of an attempt whose ranks have all ended. Rules, in order:

    1. A worker failed unasked and the executor stopped the rest of the gang: FAILED (that worker).
    2. Every worker exited 0: SUCCEEDED.
    3. Every worker exited 0 or 75, at least one 75: CHECKPOINTED.
    4. A stop or kill was requested: STOPPED, whatever the codes (the job did not fail; it resumes
       from its last checkpoint, or restarts from scratch if it never wrote one).
    5. Otherwise FAILED, naming the first worker that did not exit 0 or 75.
    """
    n = len(states)
    codes = [s.returncode for s in states]
    if stop is not None and stop["kind"] == "peer_failed":
        return Outcome.FAILED, str(stop["reason"])
    if all(c == 0 for c in codes) and not any(s.error for s in states):
        return Outcome.SUCCEEDED, f"all {n} workers exited 0"
    if all(c in (0, EXIT_CHECKPOINTED) for c in codes) and not any(s.error for s in states):
        return Outcome.CHECKPOINTED, f"checkpointed: workers exited {EXIT_CHECKPOINTED}"
    if stop is not None:
        how = "; ".join(_describe_failure(s) for s in states if _failed(s.returncode) or s.error)
        return Outcome.STOPPED, (
            f"{stop['kind']} requested; ended without a checkpoint ({how}): restarts from its "
            "last checkpoint, or from scratch if it has none"
        )
    first = next(s for s in states if s.error or _failed(s.returncode))
    return Outcome.FAILED, _describe_failure(first)


def worker_base_env(parent: Mapping[str, str]) -> dict[str, str]:
    """The part of the executor's environment a worker's fresh one starts from: ``PASSED_VARS``
    and ``PASSED_PREFIXES`` only, so no credential of the control plane (store URL,
    ``PGPASSWORD``, ``STINT_TOKEN``, ``RAY_AUTH_TOKEN``, ...) ever reaches a job."""
    return {k: v for k, v in parent.items()
            if k in PASSED_VARS or k.startswith(PASSED_PREFIXES)}


def _failed(returncode: int | None) -> bool:
    return returncode is not None and returncode not in (0, EXIT_CHECKPOINTED)


def _describe_failure(s: RankState) -> str:
    if s.error:
        return s.error
    rc = int(s.returncode or 0)
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"rank {s.rank} killed by {name}"
    return f"rank {s.rank} exited with code {rc}"


def spec_path(attempt_dir: Path, rank: int) -> Path:
    """Where the supervisor of ``rank`` reads its ``shim.Spec``."""
    return attempt_dir / f"rank-{rank}.spec"


def _mtime(path: Path) -> float | None:
    """The modification time of the plain file at ``path`` (never following a link), or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_mtime if stat.S_ISREG(st.st_mode) else None


def _exists(d: Path, rank: int, suffix: str) -> bool:
    return (d / f"rank-{rank}.{suffix}").exists()


EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
MASTER_PORTS_FROM = 10000  # the lowest rendezvous port (below the kernel's ephemeral range)


def _free_port() -> int:
    """A free port for a job's rendezvous, outside the kernel's ephemeral range when there is
    room below it: a probed ephemeral port may be handed to any process's outgoing connection
    before rank 0 binds it (seen under load: "Address already in use", one attempt lost).
    Random in the range below, probed; the kernel's choice if none is free."""
    try:
        first = int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32768
    for _ in range(64 if first > MASTER_PORTS_FROM + 1 else 0):
        port = random.randrange(MASTER_PORTS_FROM, first)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _to_json(w: WorkerLaunch) -> dict[str, Any]:
    rec = dataclasses.asdict(w)
    rec["command"] = list(w.command)
    rec["slots"] = list(w.slots)
    return rec


def _from_json(rec: Mapping[str, Any]) -> WorkerLaunch:
    return WorkerLaunch(**rec)
