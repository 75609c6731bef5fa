"""A live fleet: one control plane (one store, one API) over several clusters.

Each cluster is a ``Controller`` of its own (``member``: it sees only the jobs placed on it), with
its own executor (local virtual nodes, an agent in another namespace or machine, a Ray cluster),
its own policy and its own checkpoint storage; each enacts its plans through ``reconcile.stage``
as a single cluster does. ``FleetControl`` is the cluster map above them: at every step it

1. finishes the checkpoint copies that completed (the job arrives, preempted, on its new
   cluster, whose policy resumes it) or failed;
2. asks the global scheduler (``policies/fleet``: a function of a ``FleetView``) where to place
   the jobs not yet placed and those stranded on a cluster that is unavailable (every node
   down: its executor stopped or unreachable), and, every ``period_s``, which waiting jobs to
   move; a move sets ``Job.to_cluster``, and the source cluster's controller gives the job up
   (checkpointing it if it runs);
3. starts a copy for every moving job that holds nothing on its source any more: the
   destination's copy service pulls the checkpoint from the source's (``runtime/copy.py``),
   so the bytes cross the link between the two clusters; the job is ``migrating`` meanwhile,
   and the copy's bytes and seconds are recorded on the job and in the transition's reason;
4. steps every cluster's controller (one that raises is recovered at the next step; the
   others carry on).

A job whose checkpoint cannot be copied (the source's storage is unreachable too) still moves:
it resumes from the latest checkpoint the destination holds of it, from its start if none.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from stint.model.fleet import Fleet, FleetJob
from stint.policies.fleet.base import ClusterState, FleetView, GlobalPolicy, Pending, Waiting
from stint.runtime.controller import Controller, StepReport
from stint.runtime.copy import CopyError, CopyReport, request_fetch
from stint.runtime.states import HOLDING, TERMINAL, JobState
from stint.runtime.store import Store, load_alloc, record_transition
from stint.runtime.tables import Job, Override, User
from stint.runtime.view import LIVE_DEFAULT_WORK_S, spec_of

log = logging.getLogger(__name__)
S = JobState
_TERMINAL = [str(t) for t in TERMINAL]


@dataclass(slots=True)
class Member:
    """One cluster of the live fleet: its controller, storage directory and copy service."""

    controller: Controller
    storage: Path
    copy: str  # HOST:PORT of its copy service
    failed: bool = False  # its last step raised: recover before stepping again


@dataclass(slots=True)
class _Copy:
    job_id: int
    src: str
    dst: str
    future: cf.Future[CopyReport]


@dataclass(slots=True)
class FleetControl:
    store: Store
    fleet: Fleet
    members: dict[str, Member]  # by cluster name, in the fleet file's order
    policy: GlobalPolicy
    secret: str  # the fleet's (``fleet_secret``): every copy service asks for it
    copies: dict[int, _Copy] = field(default_factory=dict)
    _pool: cf.ThreadPoolExecutor = field(
        default_factory=lambda: cf.ThreadPoolExecutor(4, thread_name_prefix="stint-copy"))
    _period_at: float = float("-inf")

    @property
    def epoch(self) -> float:
        return next(iter(self.members.values())).controller.epoch

    # -- the loop --------------------------------------------------------------------------
    def recover(self, now: float) -> None:
        """Recover every cluster, then restart the copies a restart cut short."""
        for name, m in self.members.items():
            self._run(name, m, m.controller.recover, now)
        with self.store.read() as r:
            moving = list(r.scalars(select(Job).where(Job.state == str(S.MIGRATING),
                                                      Job.to_cluster.is_not(None))))
        for job in moving:
            self._copy(job)

    def step(self, now: float) -> StepReport:
        report = StepReport()
        with self.store.session() as w:
            self._finish_copies(w, now)
            jobs = list(w.scalars(select(Job).where(Job.state.not_in(_TERMINAL)).order_by(Job.id)))
            self._schedule(w, jobs, now)
            self._start_copies(w, jobs, now)
        for name, m in self.members.items():
            if m.failed:
                self._run(name, m, m.controller.recover, now)
            else:
                self._run(name, m, partial(_step_into, report, m.controller), now)
        return report

    @staticmethod
    def _run(name: str, m: Member, action: Callable[[float], object], now: float) -> None:
        """One cluster's step or recovery; one that raises is recovered at the next step (the
        other clusters carry on)."""
        try:
            action(now)
        except Exception:
            m.failed = True
            log.exception("cluster %s: controller step failed; recovering next step", name)
        else:
            m.failed = False

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- 1. copies -------------------------------------------------------------------------
    def _copy(self, job: Job) -> None:
        src, dst = job.cluster or "", job.to_cluster or ""
        # The move is named by when the job began migrating: the same after a restart.
        future = self._pool.submit(request_fetch, self.members[dst].copy, str(job.id),
                                   self.members[src].copy, self.secret, job.os_user,
                                   f"{src}->{dst}@{job.last_change_at!r}")
        self.copies[job.id] = _Copy(job.id, src, dst, future)

    def _finish_copies(self, w: Session, now: float) -> None:
        for jid, c in list(self.copies.items()):
            if not c.future.done():
                continue
            del self.copies[jid]
            job = w.get(Job, jid)
            if job is None or job.state != S.MIGRATING or job.to_cluster != c.dst:
                continue  # cancelled meanwhile
            try:
                r = c.future.result()
            except CopyError as exc:
                why = (f"checkpoint not copied from {c.src} to {c.dst} ({exc}); it resumes from "
                       f"the latest checkpoint {c.dst} holds of it, from its start if none")
                log.warning("job %d: %s", jid, why)
                copied: dict[str, object] = {}
            else:
                mbit = r.bytes * 8 / 1e6 / r.seconds if r.seconds > 0 else 0.0
                why = (f"checkpoint copied from {c.src} to {c.dst}: {r.bytes} bytes, {r.files} "
                       f"files in {r.seconds:.2f} s ({mbit:.1f} Mbit/s), verified (sha256 "
                       f"{r.sha256[:12]})")
                copied = {"copy_bytes": r.bytes, "copy_s": r.seconds}
            self._arrive(w, job, c.dst, now, why, **copied)

    def _arrive(self, w: Session, job: Job, dst: str, now: float, why: str,
                **columns: object) -> None:
        """The job is on ``dst`` now, preempted (or still queued): ``dst``'s policy decides."""
        if job.state == S.MIGRATING:
            record_transition(w, job, S.PREEMPTED, now, why, **columns)
        else:
            job.reason = why
        src = job.cluster
        job.cluster, job.to_cluster, job.allocation, job.target = dst, None, "[]", None
        # the forecast of the cluster it left means nothing here; dst's forecasts it next
        job.est_start_at = job.est_finish_at = job.queue_position = None
        job.pin_node = None  # (a node of the cluster it left)
        _note(w, job, f"{src or '-'}->{dst}", now)

    # -- 2. the global scheduler -----------------------------------------------------------
    def _schedule(self, w: Session, jobs: list[Job], now: float) -> None:
        for job in jobs:  # a job no cluster has: the fleet carries out its cancel
            if job.cluster is None and job.cancel_requested and job.state == S.QUEUED:
                record_transition(w, job, S.CANCELLED, now, "cancelled on request",
                                  finished_at=now)
        jobs = [j for j in jobs if j.state not in TERMINAL]
        states = self._states(jobs)
        names = list(self.members)
        index = {n: i for i, n in enumerate(names)}
        users = {uid: name for uid, name in w.execute(select(User.id, User.name))}
        fleet_jobs = {j.id: self._fleet_job(j, users.get(j.user_id, "?"), index) for j in jobs}
        pending = [Pending(fleet_jobs[j.id], None, False) for j in jobs if j.cluster is None
                   and not j.to_cluster and not j.cancel_requested]
        pending += [Pending(fleet_jobs[j.id], index[j.cluster], j.attempt > 0) for j in jobs
                    if j.cluster in index and not states[index[j.cluster]].available
                    and not j.to_cluster and j.state in (S.QUEUED, S.PREEMPTED, S.ADMITTED)
                    and not j.cancel_requested]
        period = self.policy.period_s
        waiting: list[Waiting] = []
        if period is not None and now - self._period_at >= period:
            self._period_at = now
            waiting = [Waiting(fleet_jobs[j.id], index[j.cluster], j.last_change_at - self.epoch,
                               j.attempt > 0) for j in jobs
                       if j.cluster in index and states[index[j.cluster]].available
                       and j.state in (S.QUEUED, S.PREEMPTED) and not j.target
                       and not j.to_cluster and not j.cancel_requested]
        if not pending and not waiting:
            return
        plan = self.policy.plan(FleetView(now - self.epoch, self.fleet, tuple(states), pending,
                                          waiting))
        by_id = {str(j.id): j for j in jobs}
        held = f"waiting for a cluster: the global scheduler {self.policy.name} placed it nowhere"
        for p in pending:  # (why an arrival waits, for ``stint jobs`` and ``show``)
            row = by_id[p.job.job_id]
            if p.at is None and p.job.job_id not in plan.place and row.reason != held:
                row.reason = held
        for jid, c in {**plan.place, **plan.move}.items():
            found = by_id.get(jid)
            if found is None or not 0 <= c < len(names) or names[c] == found.cluster:
                continue
            if found.cluster is None:
                self._arrive(w, found, names[c], now, f"placed on cluster {names[c]} by the "
                             f"global scheduler {self.policy.name}")
            else:
                self._move(w, found, names[c], now, f"global scheduler {self.policy.name}")

    def _move(self, w: Session, job: Job, dst: str, now: float, by: str) -> None:
        job.to_cluster = dst
        _note(w, job, f"move {job.cluster}->{dst} ({by})", now)
        log.info("job %d: moving from cluster %s to %s (%s)", job.id, job.cluster, dst, by)

    def _states(self, jobs: Sequence[Job]) -> list[ClusterState]:
        out = []
        for i, (name, m) in enumerate(self.members.items()):
            ctl = m.controller
            down = ctl.executor.down_nodes()
            up = sum(n.slots for n in ctl.executor.nodes() if n.name not in down)
            mine = [j for j in jobs if (j.to_cluster or j.cluster) == name]
            busy = sum(load_alloc(j.allocation).num_workers for j in mine if j.state in HOLDING
                       and j.cluster == name)
            assigned = sum(j.gpus for j in mine)
            backlog = sum(j.gpus * (j.est_s or LIVE_DEFAULT_WORK_S) for j in mine)
            out.append(ClusterState(i, up, busy, assigned, backlog, up > 0))
        return out

    def _fleet_job(self, job: Job, user: str, index: dict[str, int]) -> FleetJob:
        """A live job as the global scheduler sees it: its data is taken to live where it is
        (an arrival: on the first cluster), of no size to copy; its checkpoint is the size of
        its last copy, else the fleet file's ``gb_per_gpu`` x GPUs."""
        at = index.get(job.cluster or "", 0)
        ckpt_gb = (job.copy_bytes / 1e9 if job.copy_bytes is not None
                   else self.fleet.checkpoint.gb_per_gpu * job.gpus)
        return FleetJob(spec_of(job, user, self.epoch), self.fleet.clusters[at].region, at,
                        ckpt_gb, 0.0)

    # -- 3. starting copies ----------------------------------------------------------------
    def _start_copies(self, w: Session, jobs: list[Job], now: float) -> None:
        for job in jobs:
            dst = job.to_cluster
            if not dst or job.id in self.copies or job.cancel_requested:
                continue
            if dst not in self.members or job.cluster not in self.members:
                job.to_cluster = None
                job.reason = f"no cluster {dst!r} in the fleet: not moved"
                _note(w, job, f"not moved to {dst}", now)
            elif job.state == S.QUEUED:  # never ran: nothing to copy
                self._arrive(w, job, dst, now, f"moved to cluster {dst} before it ran")
            elif job.state == S.PREEMPTED:
                record_transition(w, job, S.MIGRATING, now, f"copying its checkpoint from "
                                  f"cluster {job.cluster} to {dst}")
                _note(w, job, f"copy {job.cluster}->{dst}", now)
                self._copy(job)


def _note(w: Session, job: Job, what: str, now: float) -> None:
    """An overrides row for a change the fleet made to a job: it tells the clusters' caches to
    reload the job (it left one, joined another, or changed state under them)."""
    w.add(Override(job_id=job.id, kind="cluster", value=what[:128], user_id=job.user_id, at=now))


def _step_into(into: StepReport, controller: Controller, now: float) -> None:
    _merge(into, controller.step(now))


def _merge(into: StepReport, part: StepReport) -> None:
    into.exits += part.exits
    into.actions += part.actions
    into.launched += part.launched
    into.stopped += part.stopped
    into.plan_s += part.plan_s
    into.refusals += part.refusals
