"""The controller's cache of active job rows and of the policy's view of them.

The controller is the only writer of lifecycle columns, so between steps a row can change behind
its back only by an operator request (which also writes an ``overrides`` row) -- or be new. Each
step therefore loads only new jobs, jobs with new requests, and the jobs the previous step
changed, and rebuilds only their ``JobStatus``: a step over 10,000 queued jobs costs O(changes).
Every ``resync_s`` it reloads everything, which also catches a PostgreSQL insert that committed
after one with a larger id; the rows it reports changed are then exactly those whose columns
differ from the cached ones (or that are new or gone) and those the previous step changed (their
cached copies already carry the change: a diff alone would miss it and leave their status and
their plain-queued mark stale), so ``changed`` stays complete and exact and
the policy's index stays valid (``stream`` is bumped only by ``invalidate``, after a failed step
or a restart, when cached rows cannot be trusted).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import instance_state
from sqlalchemy.orm.base import NO_VALUE

from stint.model.job import JobSpec
from stint.perf.model import PerfModel
from stint.policies.base import JobStatus
from stint.runtime.states import TERMINAL
from stint.runtime.tables import Job, Override, User
from stint.runtime.view import spec_of, status_of


class StatusSource(Protocol):
    """Where the SDK's progress reports come from (the executor)."""

    def status(self, job_id: str) -> object: ...

_TERMINAL = [str(t) for t in TERMINAL]
_MAX_JOB = select(func.max(Job.id))  # (built once: read at every step, however quiet)
_MAX_OVERRIDE = select(func.max(Override.id))
_CHUNK = 500  # ids per IN (...) query: far below SQLite's parameter limit


class JobCache:
    def __init__(self, epoch: float, perf: PerfModel, resync_s: float = 10.0,
                 member: str | None = None) -> None:
        """``member``: in a fleet, only the jobs placed on that cluster are this cache's (a job
        placed or moved there later arrives with an ``overrides`` row: the fleet writes one)."""
        self.epoch, self.perf = epoch, perf
        self.member = member
        self.resync_s = resync_s
        self.rows: dict[int, Job] = {}  # active jobs, in id (arrival) order
        self.statuses: dict[int, JobStatus] = {}  # by job id
        self.users: dict[int, str] = {}
        self.stream = 0  # bumped on every full reload (tells incremental policies to rebuild)
        self._max_job = 0
        self._max_override = 0
        self._synced_at = float("-inf")
        self._stale: set[int] = set()
        self._plain: set[int] = set()  # queued or preempted, no request, pin, target or backoff
        self._special: set[int] = set()  # the other active rows (``special``)
        self._parallel: set[int] = set()  # array tasks with an ``array_parallel`` (``parallel``)
        self._trusted = False  # the cached rows match the store (a resync may diff against them)
        self._noted: set[int] = set()  # stale rows whose change no policy sees (``noted``)

    def invalidate(self) -> None:
        """Reload everything at the next refresh (after a restart or a failed step), and tell
        the policy its index is stale (a new ``stream``)."""
        self._synced_at = float("-inf")
        self._trusted = False

    def marker(self, r: Session) -> tuple[int, int]:
        """Changes when a job is submitted or an operator request is recorded."""
        return r.scalar(_MAX_JOB) or 0, r.scalar(_MAX_OVERRIDE) or 0

    def refresh(self, r: Session, now: float) -> set[int]:
        """Bring the rows up to date inside read session ``r``; return the ids that changed."""
        marker = self.marker(r)
        self.users = {uid: name for uid, name in r.execute(select(User.id, User.name))}
        if now - self._synced_at >= self.resync_s:
            q = self._mine(select(Job).where(Job.state.not_in(_TERMINAL)).order_by(Job.id))
            old, self.rows = self.rows, {j.id: j for j in r.scalars(q)}
            if self._trusted:
                changed = {i for i in old.keys() | self.rows.keys()
                           if i not in old or i not in self.rows
                           or _columns(old[i]) != _columns(self.rows[i])}
                changed |= self._stale - self._noted  # their copies carry the change
            else:
                changed = old.keys() | self.rows.keys()
                self.statuses.clear()
                self.stream += 1
            self._trusted = True
            self._synced_at = now
        else:
            requested = set(r.scalars(select(Override.job_id).where(Override.id > self._max_override)))
            reload = self._stale | requested
            new = list(r.scalars(self._mine(select(Job).where(
                Job.id > self._max_job, Job.state.not_in(_TERMINAL)).order_by(Job.id))))
            fresh = [j for chunk in _chunks(sorted(reload)) for j in
                     r.scalars(select(Job).where(Job.id.in_(chunk)))]
            out_of_order = any(j.id < self._max_job for j in new)
            out_of_order |= any(j.id not in self.rows for j in fresh if j.state not in TERMINAL
                                and (self.member is None or j.cluster == self.member))
            for job in fresh:
                if job.state in TERMINAL or (self.member is not None and job.cluster != self.member):
                    self.rows.pop(job.id, None)
                else:
                    self.rows[job.id] = job
            for jid in reload - {j.id for j in fresh}:
                self.rows.pop(jid, None)
            self.rows.update((j.id, j) for j in new)
            if out_of_order:  # keep arrival order (a late PostgreSQL commit, a re-found row)
                self.rows = dict(sorted(self.rows.items()))
            changed = (reload - (self._noted - requested)) | {j.id for j in new}
        self._max_job, self._max_override = marker
        self._stale, self._noted = set(), set()
        r.expunge_all()  # decide on detached rows: nothing is written until the step commits
        for jid in changed:
            self.statuses.pop(jid, None)
            row = self.rows.get(jid)
            kind = None if row is None else self._plain if _plain(row) else self._special
            for group in (self._plain, self._special):
                if group is kind:
                    group.add(jid)
                else:
                    group.discard(jid)
            if row is not None and row.__dict__["array_parallel"] is not None:
                self._parallel.add(jid)
            else:
                self._parallel.discard(jid)
        return changed

    def _mine(self, q: Select[Job]) -> Select[Job]:
        return q if self.member is None else q.where(Job.cluster == self.member)

    def special(self) -> list[Job]:
        """Rows the step must look at besides the policy: holding GPUs, in a transient state, or
        with a request, pin or target. Plain queued rows are left to the policy."""
        rows = self.rows
        return [rows[i] for i in sorted(self._special) if i in rows]

    def parallel(self) -> dict[int, Job]:
        """The rows of array tasks that have an ``array_parallel``, in id order."""
        rows = self.rows
        return {i: rows[i] for i in sorted(self._parallel) if i in rows}

    def is_plain(self, job_id: int) -> bool:
        return job_id in self._plain

    def plain(self) -> frozenset[int] | set[int]:
        """The ids of the plain queued rows (``special``'s complement); not to be changed."""
        return self._plain

    def status(self, job_id: int, job: Job, now: float, reports: StatusSource) -> JobStatus:
        """The policy's view of ``job`` at store time ``now``. Cached until the row changes
        (progress is lazy, so a cached status stays exact), except for jobs that count declared
        steps, which are re-read with the SDK's latest report."""
        st = self.statuses.get(job_id)
        if st is None or job.total_steps:
            report = reports.status(str(job_id)) if job.total_steps and job.holding_since else None
            st = self.statuses[job_id] = status_of(job, self.users.get(job.user_id, "?"), self.epoch,
                                                self.perf, report if isinstance(report, dict)
                                                else None, now)
        return st

    def statuses_of(self, rows: Iterable[tuple[int, Job]], now: float,
                    reports: StatusSource) -> list[JobStatus]:
        """``status`` of each (id, row), in order; the cached ones without a call each."""
        got, out = self.statuses, []
        for job_id, job in rows:
            st = got.get(job_id)
            if st is None or job.__dict__["total_steps"]:
                st = self.status(job_id, job, now, reports)
            out.append(st)
        return out

    def spec(self, job: Job) -> JobSpec:
        """The job's spec (from its cached status when there is one)."""
        st = self.statuses.get(job.id)
        return st.spec if st is not None else spec_of(job, self.users.get(job.user_id, "?"),
                                                       self.epoch)

    def touched(self) -> set[str]:
        """Ids of rows changed so far in this step; their cached statuses are dropped."""
        ids = [j.id for j in _modified(self.rows.values())]
        for key in ids:
            self.statuses.pop(key, None)
        return {str(i) for i in ids}

    def modified(self, scope: Iterable[Job] | None = None) -> list[Job]:
        """Rows the current step changed; they are reloaded at the next refresh, and their
        cached statuses are dropped (a forecast later in the step sees the changes: a job the
        plan started holds its GPUs, it is not in the queue). ``scope``: the only rows the step
        can have changed (default: every row)."""
        out = _modified(self.rows.values() if scope is None else {j.id: j for j in scope}.values())
        self._stale.update(j.id for j in out)
        for j in out:
            self.statuses.pop(j.id, None)
        return out

    def noted(self, jobs: Iterable[Job]) -> None:
        """These rows' last changes were only what users read (a waiting reason, a decision):
        they are reloaded, but not reported changed to the policy (its view of them is the
        same)."""
        self._noted.update(j.id for j in jobs)


def _modified(rows: Iterable[Job]) -> list[Job]:
    """The rows changed since they were loaded."""
    return [j for j in rows if instance_state(j).modified]


def _plain(job: Job) -> bool:
    d = job.__dict__  # loaded column values, without the ORM descriptors' cost (see view.py)
    if d["state"] not in ("queued", "preempted") or d["target"] or d["to_cluster"]:
        return False
    if d.get("retry_at") is not None:  # waits out a retry's backoff: the controller's to offer
        return False
    return not (d["cancel_requested"] or d["preempt_requested"] or d["pin_workers"] is not None
                or d["pin_node"] is not None)


def _chunks(ids: list[int]) -> Iterable[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


# Columns users read and no policy sees (the waiting reason, the policy's decision, the forecast):
# a change to them alone is not reported as a change.
NOTE_COLUMNS = frozenset({"reason", "decision", "est_start_at", "est_finish_at",
                          "queue_position"})
_COLUMNS = tuple(c.key for c in Job.__table__.columns if c.key not in NOTE_COLUMNS)


def _columns(job: Job) -> tuple[object, ...]:
    d = job.__dict__
    return tuple(d.get(c) for c in _COLUMNS)


def changes(job: Job) -> dict[str, object]:
    """The columns of a loaded row changed since it was loaded, with their new values (a column
    set to the value it had is no change). Read from the row's committed state: the attribute
    histories say the same at many times the cost, for 100,000 rows."""
    d = job.__dict__
    return {k: d.get(k) for k, old in instance_state(job).committed_state.items()
            if old is NO_VALUE or d.get(k) != old}
