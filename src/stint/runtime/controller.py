"""The controller: the reconcile loop of the live control plane, one explicit step at a time.

Each ``step(now)``:
  1. polls the executor for attempts that ended and applies their outcomes;
  2. applies operator requests (cancel, preempt) recorded by the API;
  3. relaunches jobs whose checkpoint for a migration or resize completed, and enacts operator pins
     (``resize``/``migrate`` overrides, which the policy cannot change);
  4. builds a ``ClusterView`` of the other active jobs, asks the policy for a plan, reconciles it;
  5. writes every transition (the intent) in one transaction, and only then
  6. enacts the intents through the executor (launch, request_stop, kill).
A crash between 5 and 6 is healed by ``recover``: every intent is idempotent per (job, attempt).
Time is an argument: the caller (``serve``) owns the clock.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import inspect, select, update
from sqlalchemy.orm import Session

from stint.model.allocation import EMPTY, Allocation
from stint.policies.base import ClusterView, Policy
from stint.reconcile import Action, ActionKind, classify, reconcile
from stint.runtime.cache import JobCache
from stint.runtime.executor.base import (
    Executor,
    ExecutorError,
    JobExit,
    LaunchError,
    Outcome,
    WorkerLaunch,
)
from stint.runtime.placement import assign_slots, fits, give, pack, take
from stint.runtime.states import HOLDING, RELAUNCHING, TERMINAL, JobState
from stint.runtime.store import Store, dump_alloc, load_alloc, record_transition
from stint.runtime.tables import Job
from stint.runtime.view import LinearScaling, cluster_of, held_slots

log = logging.getLogger(__name__)
S = JobState
EXIT_CANNOT_RUN = 127  # the shells' and the supervisor's "command not found / not executable"


@dataclass(frozen=True, slots=True)
class Launch:
    job_id: int
    attempt: int
    workers: tuple[WorkerLaunch, ...]


@dataclass(frozen=True, slots=True)
class Stop:
    job_id: int
    kill: bool = False


Effect = Launch | Stop


@dataclass(slots=True)
class StepReport:
    """What one step did (for logs, tests and the benchmark)."""

    exits: int = 0
    actions: list[Action] = field(default_factory=list)
    launched: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    plan_s: float = 0.0  # time spent in policy.plan (a product figure, see DESIGN "Time")
    skipped: bool = False  # nothing could have changed: no exit, submission or request


class _Recorder:
    """Collects the transition rows a step writes (``record_transition`` calls ``add``)."""

    def __init__(self) -> None:
        self.items: list[object] = []

    def add(self, item: object) -> None:
        self.items.append(item)


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    jobs_dir: Path  # <jobs_dir>/<id>/ holds each job's checkpoint directory and log
    max_retries: int = 3  # worker failures a job survives before it is marked failed
    grace_s: float = 30.0  # checkpoint request -> SIGTERM


class Controller:
    """Drives an ``Executor`` so that the jobs in the store get the allocations a ``Policy`` plans
    (plus operator overrides). Single writer of the jobs' lifecycle columns."""

    def __init__(self, store: Store, executor: Executor, policy: Policy,
                 config: ControllerConfig) -> None:
        self.store, self.executor, self.policy, self.config = store, executor, policy, config
        nodes = [(n.name, n.slots) for n in executor.nodes()]
        store.set_nodes(nodes)
        self.cluster = cluster_of(nodes)
        self.capacity = self.cluster.gpu_capacities()
        self.perf = LinearScaling()
        self.cache = JobCache()
        self._unapplied: list[JobExit] = []
        self._dirty = True  # the last step changed something: step again even if no news
        self._last_marker: tuple[int, int] = (-1, -1)
        self._last_plan_at = float("-inf")

    # -- the loop --------------------------------------------------------------------------
    def step(self, now: float) -> StepReport:
        """One iteration. Decides on a lock-free snapshot, then writes every change (the intents)
        in one short transaction, then enacts them. Skips the work when nothing can have changed."""
        report = StepReport()
        # Exits are reported once; keep them until the transaction that applies them commits.
        exits = self._unapplied = self._unapplied + self.executor.poll()
        report.exits = len(exits)
        with self.store.read() as r:
            marker = self.cache.marker(r)
            quiet = not exits and not self._dirty and marker == self._last_marker
            if quiet and not self._tick_due(now):
                report.skipped = True
                return report
            changed = self.cache.refresh(r, now)
        jobs = self.cache.rows
        rec = _Recorder()
        effects: list[Effect] = []
        try:
            for e in exits:
                self._apply_exit(rec, jobs, e, now)
            special = self.cache.special()  # the policy alone looks at plain queued jobs
            self._apply_requests(rec, special, now, effects)
            free = self._free(special)
            held = [held_slots(j) for j in special if j.state in HOLDING]
            self._apply_targets_and_pins(rec, special, free, held, now, effects)
            self._apply_policy(rec, jobs, changed, free, held, now, effects, report)
            self._commit(rec)
        except Exception:
            self.cache.invalidate()  # the detached rows hold uncommitted changes: reload all
            raise
        self._unapplied = []
        self._last_marker, self._last_plan_at = marker, now
        self._dirty = bool(rec.items or effects)
        self._enact(effects, now, report)
        return report

    def _commit(self, rec: _Recorder) -> None:
        """Write the columns the step changed (only those: the API may have set request columns
        meanwhile) and the transitions, in one transaction."""
        changed = self.cache.modified()
        if not changed and not rec.items:
            return
        with self.store.session() as w:
            for job in changed:
                values = {a.key: a.value for a in inspect(job).attrs if a.history.has_changes()}
                w.execute(update(Job).where(Job.id == job.id).values(**values))
            w.add_all(rec.items)

    def _tick_due(self, now: float) -> bool:
        tick = getattr(self.policy, "tick_s", None)
        return tick is not None and now - self._last_plan_at >= tick

    def recover(self, now: float) -> None:
        """After a restart (or a step that raised): re-adopt live attempts, apply exits missed
        meanwhile, redo intents."""
        alive = self.executor.running()
        # Poll after ``running``: an attempt that ends in between is then reported, not lost.
        # (The local executor also computes an attempt's exit record only when it is polled.)
        exits = self._unapplied = self._unapplied + self.executor.poll()
        effects: list[Effect] = []
        with self.store.session() as s:
            jobs = self._active(s)
            for e in exits:
                self._apply_exit(s, jobs, e, now)
            for job in list(jobs.values()):
                self._recover_job(s, jobs, job, alive, now, effects)
            for jid, attempt in alive.items():
                job = jobs.get(int(jid)) if jid.isdigit() else None
                if job is None or job.attempt != attempt or job.state not in HOLDING:
                    self.executor.kill(jid)  # an orphan: its job ended or moved on
        self._unapplied = []
        self.cache.invalidate()
        self._dirty = True
        self._enact(effects, now, StepReport())

    def _recover_job(self, s: Session, jobs: dict[int, Job], job: Job, alive: dict[str, int],
                     now: float, effects: list[Effect]) -> None:
        jid = str(job.id)
        if job.state in HOLDING:
            if alive.get(jid) == job.attempt:
                if job.state == S.STARTING:
                    # Launch again: idempotent per (job, attempt), it starts only the ranks a
                    # launch cut short by the crash never started (then the job is running).
                    effects.append(self._launch_effect(job, held_slots(job)))
                elif job.state == S.CHECKPOINTING:
                    effects.append(Stop(job.id, kill=job.stop_purpose == "cancel"))
                return
            ended = self.executor.exit_of(jid, job.attempt)
            if ended is not None:
                self._apply_exit(s, jobs, ended, now)
            elif job.state == S.STARTING:
                effects.append(self._launch_effect(job, held_slots(job)))
            else:
                lost = JobExit(jid, job.attempt, Outcome.STOPPED, {}, "lost while the control "
                               "plane was down", now)
                self._apply_exit(s, jobs, lost, now)
        elif job.state == S.ADMITTED:
            record_transition(s, job, S.QUEUED, now, "admission not carried out before a restart")
        elif job.state in RELAUNCHING:
            record_transition(s, job, S.PREEMPTED, now, "relaunch not carried out before a restart")

    # -- 1. outcomes -----------------------------------------------------------------------
    def _apply_exit(self, s: Session, jobs: dict[int, Job], e: JobExit, now: float) -> None:
        job = jobs.get(int(e.job_id)) if e.job_id.isdigit() else None
        if job is None or job.attempt != e.attempt or job.state not in HOLDING:
            return  # stale: an attempt the store has already moved past
        codes = ",".join(f"{r}:{c}" for r, c in sorted(e.exit_codes.items()))
        self._release(job, now)
        common = {"stop_deadline": None, "exit_code": _worst(e.exit_codes)}
        if e.outcome is Outcome.SUCCEEDED:
            record_transition(s, job, S.SUCCEEDED, now, "all workers exited 0", finished_at=now,
                              target=None, **common)
        elif job.stop_purpose == "cancel":
            record_transition(s, job, S.CANCELLED, now, "cancelled on request", finished_at=now,
                              target=None, **common)
        elif e.outcome in (Outcome.CHECKPOINTED, Outcome.STOPPED):
            why = job.stop_purpose or "stopped"
            how = "checkpointed" if e.outcome is Outcome.CHECKPOINTED else "stopped without a checkpoint"
            record_transition(s, job, S.PREEMPTED, now, f"{why}: {how} ({e.reason})",
                              preemptions=job.preemptions + 1, **common)
        else:
            self._worker_failed(s, job, f"{e.reason} [exit codes {codes}]", now, common,
                                EXIT_CANNOT_RUN in e.exit_codes.values())

    def _worker_failed(self, s: Session, job: Job, why: str, now: float, common: dict[str, Any],
                       permanent: bool = False) -> None:
        """Retry from the last checkpoint, or fail: after ``max_retries``, and at once when the
        command can never run (a refused launch, or exit code 127: the command was not found or
        could not be executed; it never ran, so there is nothing to resume)."""
        failures = job.failures + 1
        if permanent:
            record_transition(s, job, S.FAILED, now, f"{why}; cannot run, not retried",
                              failures=failures, finished_at=now, target=None, **common)
        elif failures > self.config.max_retries:
            record_transition(s, job, S.FAILED, now, f"{why}; gave up after {failures - 1} "
                              "retries", failures=failures, finished_at=now, target=None, **common)
        else:
            record_transition(s, job, S.PREEMPTED, now, f"{why}; retry {failures} of "
                              f"{self.config.max_retries} from the last checkpoint",
                              failures=failures, target=None, stop_purpose="retry", **common)

    def _release(self, job: Job, now: float) -> None:
        if job.holding_since is not None:
            gpus = load_alloc(job.allocation).num_workers
            job.attained_gpu_s += gpus * max(0.0, now - job.holding_since)
        job.holding_since = None
        job.slots = "{}"

    # -- 2. operator requests --------------------------------------------------------------
    def _apply_requests(self, s: Session, jobs: list[Job], now: float,
                        effects: list[Effect]) -> None:
        for job in jobs:
            if job.cancel_requested and job.stop_purpose != "cancel":
                if job.state in HOLDING:
                    self._stop(s, job, "cancel", now, effects, reason="cancel requested")
                elif job.state not in TERMINAL:
                    record_transition(s, job, S.CANCELLED, now, "cancelled on request",
                                      finished_at=now)
            if job.preempt_requested:
                job.preempt_requested = False
                if job.state in (S.RUNNING, S.STARTING):
                    self._stop(s, job, "preempt", now, effects, reason="preempt requested by operator")

    def _stop(self, s: Session, job: Job, purpose: str, now: float, effects: list[Effect],
              reason: str, target: Allocation | None = None) -> None:
        """Ask a job holding GPUs to checkpoint and stop (a cancel kills it instead)."""
        cols = {"stop_purpose": purpose, "stop_deadline": now + self.config.grace_s,
                    "target": dump_alloc(target) if target else None}
        if job.state == S.CHECKPOINTING:
            for k, v in cols.items():  # already stopping: only the purpose changes
                setattr(job, k, v)
        else:
            record_transition(s, job, S.CHECKPOINTING, now, reason, **cols)
        effects.append(Stop(job.id, kill=purpose == "cancel"))

    # -- 3. targets and pins ---------------------------------------------------------------
    def _apply_targets_and_pins(self, s: Session, jobs: list[Job], free: list[int],
                                held: list[dict[int, list[int]]], now: float,
                                effects: list[Effect]) -> None:
        for job in jobs:
            if job.state == S.PREEMPTED and job.target:
                target = load_alloc(job.target)
                job.target = None
                if fits(target, free):
                    self._launch(s, job, target, free, held, now, effects,
                                 f"{job.stop_purpose} after the checkpoint")
            if _pinned(job) and job.state in (S.QUEUED, S.PREEMPTED, S.RUNNING):
                self._enact_pin(s, job, free, held, now, effects)

    def _enact_pin(self, s: Session, job: Job, free: list[int],
                   held: list[dict[int, list[int]]], now: float, effects: list[Effect]) -> None:
        current = load_alloc(job.allocation) if job.state in HOLDING else EMPTY
        avail = list(free)
        give(avail, current)
        want = self._pin_target(job, current, avail)
        if want is None or want == current:
            return  # already there, or waiting for capacity
        why = f"operator pin ({_pin_text(job)})"
        if job.state == S.RUNNING:
            purpose = "resize" if want.num_workers != current.num_workers else "migrate"
            self._stop(s, job, purpose, now, effects, reason=why, target=want)
        else:
            self._launch(s, job, want, free, held, now, effects, why)

    def _pin_target(self, job: Job, current: Allocation, avail: list[int]) -> Allocation | None:
        last = load_alloc(job.allocation)
        count = job.pin_workers or last.num_workers or job.gpus
        if job.pin_node is not None:
            try:
                node = self.cluster.index_of(job.pin_node)
            except KeyError:
                return None
            want = Allocation.of({node: count})
            return want if fits(want, avail) else None
        if current.num_workers == count:
            return current
        return pack(count, avail, prefer=last.nodes)

    # -- 4. the policy ---------------------------------------------------------------------
    def _apply_policy(self, s: Session, jobs: dict[int, Job], changed_ids: set[int],
                      free: list[int], held: list[dict[int, list[int]]], now: float,
                      effects: list[Effect], report: StepReport) -> None:
        # ``changed`` is complete (new, reloaded and just-modified rows), so incremental policies
        # may keep their index between calls of the same stream.
        changed = {str(i) for i in changed_ids} | self.cache.touched()
        plain = self.cache.is_plain
        statuses = [self.cache.status(i, j) for i, j in jobs.items() if plain(i) or _policy_sees(j)]
        known = {st.job_id: st for st in statuses}
        view = ClusterView(now, self.cluster, statuses, tuple(free), self.perf,
                           tuple(sorted(changed)), by_id=known, stream=self.cache.stream)
        t0 = time.perf_counter()  # measures the policy's latency only; not a scheduling input
        plan = self.policy.plan(view)
        report.plan_s = time.perf_counter() - t0
        for jid in [j for j in plan.allocations if j not in known]:
            log.warning("policy %s planned unknown or pinned job %s; ignored", self.policy.name, jid)
            del plan.allocations[jid]
        plan.reject = {j: r for j, r in plan.reject.items() if j in known}
        current = _Lookup(lambda jid: known[jid].allocation)
        has_run = _Lookup(lambda jid: jobs[int(jid)].attempt > 0)
        for action in reconcile(plan, current, has_run):
            self._apply_action(s, jobs[int(action.job_id)], action, free, held, now, effects,
                               report)

    def _apply_action(self, s: Session, job: Job, a: Action, free: list[int],
                      held: list[dict[int, list[int]]], now: float, effects: list[Effect],
                      report: StepReport) -> None:
        reason = f"policy {self.policy.name}: {a.kind}" + (f" ({a.reason})" if a.reason else "")
        if a.kind is ActionKind.REJECT:
            if job.state not in HOLDING:
                record_transition(s, job, S.REJECTED, now, reason, finished_at=now)
                report.actions.append(a)
        elif a.kind is ActionKind.PREEMPT:
            self._stop(s, job, "preempt", now, effects, reason=reason)
            report.actions.append(a)
        elif a.kind in (ActionKind.RESIZE, ActionKind.MIGRATE):
            avail = list(free)
            give(avail, a.before)
            if fits(a.after, avail):
                self._stop(s, job, str(a.kind), now, effects, reason=reason, target=a.after)
                report.actions.append(a)
        elif fits(a.after, free):  # START or RESUME; otherwise it waits for capacity
            self._launch(s, job, a.after, free, held, now, effects, reason)
            report.actions.append(a)

    # -- 5. intents ------------------------------------------------------------------------
    def _launch(self, s: Session, job: Job, alloc: Allocation, free: list[int],
                held: list[dict[int, list[int]]], now: float, effects: list[Effect],
                reason: str) -> None:
        """Write the intent to run ``job`` on ``alloc`` as a new attempt (via the lifecycle's
        intermediate state), reserve its GPUs and slots, and queue the launch."""
        if job.state == S.QUEUED:
            record_transition(s, job, S.ADMITTED, now, reason)
        elif job.state == S.PREEMPTED:
            kind = classify(load_alloc(job.allocation), alloc, True)
            via = {ActionKind.RESIZE: S.RESIZING, ActionKind.MIGRATE: S.MIGRATING}.get(kind, S.RESUMED)
            record_transition(s, job, via, now, reason)
        slots = assign_slots(alloc, self.capacity, held)
        held.append(slots)
        take(free, alloc)
        job.attempt += 1
        record_transition(
            s, job, S.STARTING, now, f"attempt {job.attempt} on {_where(self, alloc)}",
            allocation=dump_alloc(alloc), slots=json.dumps(slots), holding_since=now,
            first_start_at=job.first_start_at if job.first_start_at is not None else now,
            stop_purpose=None, target=None,
        )
        effects.append(self._launch_effect(job, slots))

    def _launch_effect(self, job: Job, slots: dict[int, list[int]]) -> Launch:
        job_dir = self.config.jobs_dir / str(job.id)
        command = tuple(json.loads(job.command))
        pairs = [(node, slot) for node in sorted(slots) for slot in slots[node]]
        by_node: dict[int, list[int]] = {}
        for node, slot in pairs:
            by_node.setdefault(node, []).append(slot)
        workers = []
        rank = 0
        for node in sorted(by_node):
            for slot in by_node[node]:  # one accelerator slot per worker
                workers.append(WorkerLaunch(
                    job_id=str(job.id), attempt=job.attempt, rank=rank, world_size=len(pairs),
                    logical_world_size=job.max_gpus, node=self.cluster.nodes[node].name,
                    slots=(slot,), command=command, ckpt_dir=str(job_dir / "ckpt"),
                    log_path=str(job_dir / "log.txt"), os_user=job.os_user, cwd=job.cwd,
                    env=json.loads(job.env or "{}"), job_dir=str(job_dir),
                ))
                rank += 1
        return Launch(job.id, job.attempt, tuple(workers))

    # -- 6. enacting -----------------------------------------------------------------------
    def _enact(self, effects: list[Effect], now: float, report: StepReport) -> None:
        for eff in effects:
            if isinstance(eff, Stop):
                if eff.kill:
                    self.executor.kill(str(eff.job_id))
                else:
                    self.executor.request_stop(str(eff.job_id), self.config.grace_s)
                report.stopped.append(eff.job_id)
        for eff in effects:
            if isinstance(eff, Launch):
                self._enact_launch(eff, now)
                report.launched.append(eff.job_id)

    def _enact_launch(self, eff: Launch, now: float) -> None:
        """Launch one attempt; a refusal by the executor fails that job alone (at once if it can
        never succeed, else as a worker failure), never the step."""
        error, permanent = None, False
        try:
            (self.config.jobs_dir / str(eff.job_id)).mkdir(parents=True, exist_ok=True)
            self.executor.launch(eff.workers)
        except LaunchError as exc:
            error, permanent = str(exc), True
        except ExecutorError as exc:  # anything else escapes the step: ``recover`` redoes it
            error = str(exc)
        if error is not None:
            log.warning("job %s attempt %s: launch refused: %s", eff.job_id, eff.attempt, error)
        with self.store.session() as s:
            job = s.get(Job, eff.job_id)
            if job is None or job.attempt != eff.attempt or job.state != S.STARTING:
                return
            if error is None:
                record_transition(s, job, S.RUNNING, now, f"attempt {eff.attempt} launched")
            else:
                self._release(job, now)
                self._worker_failed(s, job, f"launch refused: {error}", now, {}, permanent)

    # -- helpers ---------------------------------------------------------------------------
    def _active(self, s: Session) -> dict[int, Job]:
        q = select(Job).where(Job.state.not_in([str(t) for t in TERMINAL])).order_by(Job.id)
        return {j.id: j for j in s.scalars(q)}

    def _free(self, jobs: list[Job]) -> list[int]:
        free = list(self.capacity)
        for job in jobs:
            if job.state in HOLDING:
                take(free, load_alloc(job.allocation))
        return free


class _Lookup(Mapping[str, Any]):
    """A read-only mapping computed on access: reconcile reads only the jobs a plan names."""

    def __init__(self, fn: Callable[[str], Any]) -> None:
        self._fn = fn

    def __getitem__(self, key: str) -> Any:
        return self._fn(key)

    def __iter__(self) -> Iterator[str]:
        raise TypeError("not iterable")

    def __len__(self) -> int:
        raise TypeError("not sized")


def _policy_sees(job: Job) -> bool:
    """Jobs the policy may move: not terminal, not mid-checkpoint, not cancelled, not pinned."""
    if job.state not in (S.QUEUED, S.PREEMPTED, S.STARTING, S.RUNNING):
        return False
    return not (job.cancel_requested or _pinned(job))


def _pinned(job: Job) -> bool:
    return job.pin_workers is not None or job.pin_node is not None


def _pin_text(job: Job) -> str:
    parts = []
    if job.pin_workers is not None:
        parts.append(f"workers={job.pin_workers}")
    if job.pin_node is not None:
        parts.append(f"node={job.pin_node}")
    return ", ".join(parts)


def _where(ctl: Controller, alloc: Allocation) -> str:
    return " ".join(f"{ctl.cluster.nodes[n].name}x{c}" for n, c in alloc.workers)


def _worst(codes: Mapping[int, int]) -> int | None:
    """The first non-zero exit code, else 0 (None if no worker exited)."""
    values = list(codes.values())
    nonzero = [c for c in values if c != 0]
    return nonzero[0] if nonzero else (0 if values else None)
