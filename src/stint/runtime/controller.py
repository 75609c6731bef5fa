"""The controller: the reconcile loop of the live control plane, one explicit step at a time.

Each ``step(now)``:
  1. polls the executor for attempts that ended and applies their outcomes;
  2. applies operator requests (cancel, preempt) recorded by the API, and operator pins of running
     jobs (``resize``/``migrate`` overrides; a queued job's pin waits for the policy to admit it);
  3. hands the active jobs (times on the store's clock, ``Store.epoch``) to its ``Mechanism``,
     which builds the policy's view, runs the policy and stages the plan on the capacity ledger --
     the same core the simulator holds, so a plan is carried out or refused the same way in both
     (refusals are logged and counted in ``StepReport.refusals``);
  4. turns each accepted action into intents: a job that holds GPUs is asked to checkpoint (with
     a *target* if it resizes or migrates); a job to start gets its target and launches as soon as
     the GPUs are physically free (at once, or when the jobs the same plan stopped have exited);
  5. writes every transition (the intent) in one transaction, and only then
  6. enacts the intents through the executor (launch, request_stop, kill).
A crash between 5 and 6 is healed by ``recover``: every intent is idempotent per (job, attempt).
Time is an argument: the caller (``serve``) owns the clock.

A running job whose SDK reports it at its last step or past its loop (``view.finishing``) is
left to end: the plan's preemption, resize, migration or rejection of it is refused, and an
operator's preempt or pin is not carried out (a cancel, a time limit and a hang still are).

Each job's bounds (``Job.memory_max`` ... ``max_retries``; None: the operator's defaults,
``ControllerConfig.limits`` and its own fields) are the controller's to keep, besides the policy:
  - memory and processes per worker, the log's and the directory's bytes: handed to the
    executor with every launch (``WorkerLaunch``), which enforces them;
  - the time limit: the seconds a job holds GPUs, summed over its attempts (queued and preempted
    time does not count). Past it the job is asked to checkpoint and stop (the ordinary stop,
    ``grace_s``), then it fails with ``time limit (N s)``;
  - hangs: a running job whose SDK step has not changed for its ``hang_s`` (a job that touches
    ``STINT_HEARTBEAT_FILE``: whose heartbeat has not) is killed and retried from its last
    checkpoint, a failure like any other. An attempt is judged from its own first report (after
    a restart of the controller: from when it re-adopted it); a job that reports neither a step
    nor a heartbeat is never judged;
  - retries: a failed attempt waits ``retry_backoff_s * 2**(failures - 1)`` seconds (at most
    ``retry_backoff_max_s``) before the policy sees the job again (``Job.retry_at``); the policy
    is not offered it before. A launch the OS refused for want of processes, memory or
    descriptors (``LaunchError.transient``) waits the same way without counting as a failure, up
    to ``MAX_TRANSIENT_REFUSALS`` in a row.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from stint.config import Limits, UserLimits
from stint.mechanism import Mechanism
from stint.model.allocation import Allocation, Plan
from stint.perf.model import PerfModel
from stint.perf.scaling import ScalingModel
from stint.perf.types import TypedPerf, TypeSpeeds
from stint.placement.ledger import Ledger, Refusal, RefusalCode
from stint.placement.packing import assign_slots, fits, give, pack, take
from stint.policies.base import JobStatus, Policy, unexplained_wait
from stint.policies.typed import wrap
from stint.reconcile import Action, ActionKind, classify
from stint.runtime.accounts import launch_refusal
from stint.runtime.cache import NOTE_COLUMNS, JobCache, changes
from stint.runtime.executor.base import (
    Executor,
    ExecutorError,
    JobExit,
    LaunchError,
    Outcome,
    WorkerLaunch,
    node_resources,
)
from stint.runtime.measured import fitted_costs, record_policy
from stint.runtime.metrics import Metrics
from stint.runtime.states import (
    ENDING_STOPS,
    HOLDING,
    RELAUNCHING,
    STOP_STRENGTH,
    SUBMITTED,
    TERMINAL,
    JobState,
    StopPurpose,
)
from stint.runtime.store import (
    Store,
    Writes,
    dump_alloc,
    load_alloc,
    record_transition,
    update_jobs,
)
from stint.runtime.tables import Attempt, Decision, Job, Transition
from stint.runtime.view import (
    finishing,
    held_slots,
    live_cluster,
    logical_allocation,
    logical_world_size,
)
from stint.sim.costs import CostModel, FittedCosts

if TYPE_CHECKING:
    from stint.sim.forecast import Estimate

log = logging.getLogger(__name__)
S = JobState
P = StopPurpose
EXIT_CANNOT_RUN = 127  # the shells' and the supervisor's "command not found / not executable"
MAX_TRANSIENT_REFUSALS = 20  # launches refused for now (EAGAIN, ENOMEM, ...) in a row, then fail
HANG_CHECK_S = 1.0  # the shortest time between reads of the running jobs' progress for hangs
WATCH_EVERY_S = 0.2  # new attempts' reports are read this often for their first step
WATCH_FOR_S = 900.0  # ... for at most this long after their launch
COSTS_REFIT_S = 60.0  # the forecast's live cost model is fitted again this often
COSTS_SAMPLE = 500  # from the last this many attempts
PASSED_REFORECAST_S = 1.0  # a passed estimated start is estimated again after at most this
BAND_MAX_JOBS = 300  # the start band (two more forecasts) only for states this small


# "operator" is a preemption an operator asked for (``stint preempt``): the plan did not count on
# it, so its end is news to the policy (``_expected``), which decides when the job resumes.
# "time" (the time limit) and "hung" end the attempt whatever the plan wanted next.
_KILLS = frozenset({StopPurpose.CANCEL, StopPurpose.HUNG})  # stops that kill at once (a hung job cannot checkpoint)


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
    refusals: list[str] = field(default_factory=list)  # actions the ledger refused, with why


@dataclass(slots=True)
class _Step:
    """One step's state, built at its start and handed to the methods that act in it: when it
    runs, where its transitions go, the active jobs, and what it has decided so far."""

    now: float
    writes: Writes  # the step's recorder (``step``) or a session (``recover``)
    jobs: dict[int, Job]  # the active jobs by id
    report: StepReport = field(default_factory=StepReport)
    effects: list[Effect] = field(default_factory=list)  # stops and launches to enact
    free: list[int] = field(default_factory=list)  # GPUs per node free for a launch now
    held: list[dict[int, list[int]]] = field(default_factory=list)  # slots held per job
    targeted: list[Job] = field(default_factory=list)  # given a target: they may launch now


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
    # Estimated start and finish: a fresh policy of the same kind, replayed by the simulator
    # from the live state every ``forecast_s`` while something changed (None: no forecasts); a
    # state of more than ``forecast_max_jobs`` active jobs is not forecast (bounded cost).
    forecast_policy: Callable[[], Policy] | None = None
    forecast_s: float = 10.0
    forecast_max_jobs: int = 1000
    # On a typed cluster: each job's speed per accelerator type (``stint serve --cluster``'s file)
    type_speeds: TypeSpeeds = field(default_factory=TypeSpeeds)
    slow_step_s: float = 1.0  # a step slower than this is logged as a warning
    multi_user: bool = False  # jobs run as their owners' accounts: each launch checks the account
    hang_s: float = 600.0  # a job's hang timeout unless it gives its own (0: off)
    retry_backoff_s: float = 10.0  # wait before a failed attempt's first retry; doubles each time
    retry_backoff_max_s: float = 600.0
    # Per user: the bounds of a job that asks none, and the most it may ask (``[limits]``)
    limits: Limits = field(default_factory=Limits)
    # The policy's registry name and options as given (``stint replay`` reads them from the
    # store; "" : the policy's own name, no options)
    policy_name: str = ""
    policy_options: tuple[str, ...] = ()


class Controller:
    """Drives an ``Executor`` so that the jobs in the store get the allocations a ``Policy`` plans
    (plus operator overrides). Single writer of the jobs' lifecycle columns."""

    def __init__(self, store: Store, executor: Executor, policy: Policy,
                 config: ControllerConfig, metrics: Metrics | None = None,
                 member: str = "", region: str = "") -> None:
        """``member``: in a fleet, the name of the cluster this controller runs (it sees only
        the jobs placed there, ``Job.cluster``; ``runtime/fleet.py`` places and moves them)."""
        self.store, self.executor, self.policy, self.config = store, executor, policy, config
        self.metrics = metrics
        self.member = member
        infos = executor.nodes()
        nodes = [(n.name, n.slots) for n in infos]
        types = [n.gpu_type for n in infos] if any(n.gpu_type for n in infos) else []
        store.set_nodes(nodes, member, region, types,
                        [(n.role, *node_resources(n)) for n in infos])
        self.cluster = live_cluster(infos)
        self.policy = wrap(policy, self.cluster)  # on a typed cluster: kept to one type per job
        self.capacity = self.cluster.gpu_capacities()
        self.perf: PerfModel = ScalingModel()  # linear in workers, relative to the request
        if self.cluster.typed:  # times each job's speed on its type
            self.perf = TypedPerf(self.perf, self.cluster, config.type_speeds)
        # The policy and the ledger its plans are staged on (rebuilt from the store each step).
        self.mechanism = Mechanism(self.cluster, self.policy, self.perf)
        self.epoch = store.epoch(time.time())  # the store's clock: policy time is now - epoch
        self.cache = JobCache(self.epoch, self.perf, member=member or None)
        self.refused = 0  # actions refused since start (also logged)
        self._unapplied: list[JobExit] = []
        self._dirty = True  # the last step changed something: step again even if no news
        self._last_marker: tuple[int, int] = (-1, -1)
        self._last_plan_at = float("-inf")
        self._pending: set[str] = set()  # ids changed since the policy's last call
        self._held_back: set[int] = set()  # array tasks past their parallelism (``_held_back``)
        self._forecast_at = float("-inf")  # when the last forecast was made
        self._forecast_stale = True  # the policy was asked since: the state may have moved
        self._down: frozenset[int] = frozenset()  # nodes down at the last step
        self._wake_at = float("-inf")  # a retry, time limit or hang check falls due then
        self._hang_check_at = float("-inf")
        self._seen: dict[int, _Seen] = {}  # running jobs' last progress (hangs are judged by it)
        # (job, attempt) launched and not yet checked for hangs -> the report it left before
        self._launched: dict[tuple[int, int], tuple[object, object]] = {}
        self._launch_failed = False  # a launch failed since the policy's last call: news to it
        # Attempts launched whose first step of their own is not seen yet -> the SDK's report
        # (state, step) before the launch, and the launch's time; and measured times to write
        # (``Attempt`` columns).
        self._unstepped: dict[tuple[int, int], tuple[tuple[object, object], float]] = {}
        self._marks: list[tuple[int, int, dict[str, Any]]] = []
        self._watch_at = float("-inf")  # the next read of new attempts' first steps
        self._costs_at = float("-inf")  # when the forecast's costs were last fitted
        self._costs: FittedCosts | None = None
        self._passes_at = float("inf")  # the earliest estimated start of a waiting job
        record_policy(store, config.policy_name or policy.name, config.policy_options)

    # -- the loop --------------------------------------------------------------------------
    def step(self, now: float) -> StepReport:
        """One iteration. Decides on a lock-free snapshot, then writes every change (the intents)
        in one short transaction, then enacts them. Skips the work when nothing can have changed."""
        t0 = time.perf_counter()  # the step's latency, a product figure (not a scheduling input)
        report = self._step(now)
        if not report.skipped:
            self._observe(report, time.perf_counter() - t0)
        return report

    def _observe(self, report: StepReport, seconds: float) -> None:
        if seconds > self.config.slow_step_s:
            log.warning("slow controller step: %.2f s (policy %.2f s, %d actions; threshold "
                        "%g s)", seconds, report.plan_s, len(report.actions),
                        self.config.slow_step_s)
        if self.metrics is None:
            return
        self.metrics.step_s.observe(seconds)
        self.metrics.plan_s.observe(report.plan_s)
        for a in report.actions:
            self.metrics.actions.labels(str(a.kind)).inc()
        if report.refusals:
            self.metrics.refused.inc(len(report.refusals))

    def _count(self, rec: _Recorder, jobs: dict[int, Job]) -> None:
        """The committed transitions, in the metrics."""
        if self.metrics is None:
            return
        for item in rec.items:
            if isinstance(item, Transition) and item.job_id in jobs:
                self.metrics.transition(item, jobs[item.job_id])

    def _step(self, now: float) -> StepReport:
        report = StepReport()
        # Exits are reported once; keep them until the transaction that applies them commits.
        exits = self._unapplied = self._unapplied + self.executor.poll()
        report.exits = len(exits)
        self._watch_first_steps(now)
        with self.store.read() as r:
            marker = self.cache.marker(r)
            down = self._nodes_down()
            quiet = (not exits and not self._dirty and marker == self._last_marker
                     and down == self._down and now < self._wake_at)
            if quiet and not self._tick_due(now):
                report.skipped = True
                self._forecast_safely(now)  # one that was not due at the last change may be now
                return report
            self._pending.update(str(i) for i in self.cache.refresh(r, now))
        jobs = self.cache.rows
        # The policy is asked when something it did not cause happened (a submission or request,
        # an attempt that ended by itself) or a tick is due -- the simulator's events. The exit of
        # a checkpoint the controller asked for is not news: the plan already counted on it.
        ask = (marker != self._last_marker or self._last_plan_at == float("-inf")
               or down != self._down
               or any(not _expected(jobs.get(int(e.job_id)) if e.job_id.isdigit() else None, e)
                      for e in exits) or self._tick_due(now) or self._launch_failed)
        rec = _Recorder()
        step = _Step(now, rec, jobs, report)
        try:
            for e in exits:
                self._apply_exit(step, e)
            special = self.cache.special()  # the policy alone looks at plain queued jobs
            self._apply_requests(step, special)
            ask = self._apply_bounds(step, special) or ask
            step.free = self._free(special)
            for node in down:  # nothing launches on a node that is down
                step.free[node] = 0
            step.held = [held_slots(j) for j in special if j.state in HOLDING]
            self._apply_pins(step, special)
            if ask:
                self._apply_policy(step)
            waiting = {j.id: j for j in (*special, *step.targeted)}
            self._launch_targets(step, [waiting[i] for i in sorted(waiting)])
            # Without the policy, a step changes only the rows it looks at (not plain ones).
            self._commit(rec, None if ask else [*special, *(jobs[i] for i in _exited(exits) if i in jobs)])
            self._count(rec, jobs)
        except Exception:
            self.cache.invalidate()  # the detached rows hold uncommitted changes: reload all
            raise
        self._unapplied = []
        if down != self._down:  # ``stint nodes`` shows them down
            self.store.set_node_states(self.member, [self.cluster.nodes[i].name for i in down])
        self._last_marker, self._down = marker, down
        if ask:
            self._last_plan_at, self._launch_failed = now, False
        self._dirty = bool(rec.items or step.effects)
        self._wake_at = self._next_wake(special, now)
        self._enact(step.effects, now, report)
        self._forecast_safely(now)
        return report

    def _forecast_safely(self, now: float) -> None:
        try:
            self.forecast(now)
        except Exception:  # a forecast is advice: its failure must not stop the loop
            log.exception("forecast failed; estimated starts are not updated")
            self.cache.invalidate()

    def _commit(self, rec: _Recorder, scope: list[Job] | None) -> None:
        """Write the columns the step changed (only those: the API may have set request columns
        meanwhile) and the transitions, in one transaction. ``scope``: the rows it may have
        changed (None: any)."""
        changed = self.cache.modified(scope)
        if not changed and not rec.items and not self._marks:
            return
        notes = []  # rows whose only change is what users read (a waiting reason, a decision)
        with self.store.session() as w:
            rows = [(job.id, changes(job)) for job in changed]
            for job, (_, v) in zip(changed, rows, strict=True):
                if v.keys() <= _NOTES:
                    notes.append(job)
                else:
                    self._pending.add(str(job.id))
            # (a column set to the value it had marks the row, changes nothing)
            update_jobs(w, [(job_id, v) for job_id, v in rows if v])
            w.add_all(rec.items)
            self._flush_marks(w)
        self.cache.noted(notes)  # not news to the policy: its view of them did not change
        for t in rec.items:
            if isinstance(t, Transition):
                log.log(logging.INFO if t.dst in _NOTABLE else logging.DEBUG, "job %s: %s -> "
                        "%s (%s)", t.job_id, t.src or "-", t.dst, t.reason)

    def _tick_due(self, now: float) -> bool:
        """True if a slot boundary of the policy's ticks that it may act on passed since the
        last plan (``mechanism.tick_passed``: the simulator's rule)."""
        return self.mechanism.tick_passed(self._last_plan_at - self.epoch, now - self.epoch)

    def recover(self, now: float) -> None:
        """After a restart (or a step that raised): re-adopt live attempts, apply exits missed
        meanwhile, redo intents."""
        alive = self.executor.running()
        # Poll after ``running``: an attempt that ends in between is then reported, not lost.
        # (The local executor also computes an attempt's exit record only when it is polled.)
        exits = self._unapplied = self._unapplied + self.executor.poll()
        with self.store.session() as s:
            step = _Step(now, s, self._active(s))
            for e in exits:
                self._apply_exit(step, e)
            for job in list(step.jobs.values()):
                self._recover_job(step, job, alive)
            for jid, attempt in alive.items():
                row = step.jobs.get(int(jid)) if jid.isdigit() else None
                if row is None or row.attempt != attempt or row.state not in HOLDING:
                    self.executor.kill(jid)  # an orphan: its job ended or moved on
            self._flush_marks(s)
        self._unapplied = []
        self.cache.invalidate()
        self._dirty = True
        self._enact(step.effects, now, step.report)

    def _recover_job(self, step: _Step, job: Job, alive: dict[str, int]) -> None:
        s, now, effects = step.writes, step.now, step.effects
        jid = str(job.id)
        if job.state in HOLDING:
            if alive.get(jid) == job.attempt:
                if job.state == S.STARTING:
                    # Launch again: idempotent per (job, attempt), it starts only the ranks a
                    # launch cut short by the crash never started (then the job is running).
                    effects.append(self._launch_effect(job, held_slots(job)))
                elif job.state == S.CHECKPOINTING:
                    effects.append(Stop(job.id, kill=job.stop_purpose in _KILLS))
                return
            ended = self.executor.exit_of(jid, job.attempt)
            if ended is not None:
                self._apply_exit(step, ended)
            elif job.state == S.STARTING:
                effects.append(self._launch_effect(job, held_slots(job)))
            else:
                lost = JobExit(jid, job.attempt, Outcome.STOPPED, {}, "lost while the control "
                               "plane was down", now)
                self._apply_exit(step, lost)
        elif job.state == S.ADMITTED and not job.target:
            record_transition(s, job, S.QUEUED, now, "admission not carried out before a restart")
        elif job.state in RELAUNCHING and not job.to_cluster:  # (a move's copy: the fleet's)
            record_transition(s, job, S.PREEMPTED, now, "relaunch not carried out before a restart")

    # -- 1. outcomes -----------------------------------------------------------------------
    def _apply_exit(self, step: _Step, e: JobExit) -> None:
        s, now = step.writes, step.now
        job = step.jobs.get(int(e.job_id)) if e.job_id.isdigit() else None
        if job is None or job.attempt != e.attempt or job.state not in HOLDING:
            return  # stale: an attempt the store has already moved past
        codes = ",".join(f"{r}:{c}" for r, c in sorted(e.exit_codes.items()))
        self._mark_end(job, now, str(e.outcome))
        self._release(job, now)
        common = {"stop_deadline": None, "exit_code": _worst(e.exit_codes)}
        if e.outcome is Outcome.SUCCEEDED:
            record_transition(s, job, S.SUCCEEDED, now, "all workers exited 0", finished_at=now,
                              target=None, **common)
        elif job.stop_purpose == P.CANCEL:
            record_transition(s, job, S.CANCELLED, now, "cancelled on request", finished_at=now,
                              target=None, **common)
        elif job.stop_purpose == P.REJECT:
            record_transition(s, job, S.REJECTED, now, job.reason, finished_at=now, target=None,
                              **common)
        elif job.stop_purpose == P.TIME or self._time_spent(job):
            how = {Outcome.CHECKPOINTED: "checkpointed", Outcome.STOPPED: "stopped"}.get(
                e.outcome, f"exit codes {codes}")
            record_transition(s, job, S.FAILED, now, f"time limit ({self._time_limit(job):g} "
                              f"s): {how} ({e.reason})", finished_at=now, target=None, **common)
        elif job.stop_purpose == P.HUNG:
            self._worker_failed(s, job, job.reason, now, common)
        elif e.outcome in (Outcome.CHECKPOINTED, Outcome.STOPPED):
            why = "preempt" if job.stop_purpose == P.OPERATOR else job.stop_purpose or "stopped"
            how = "checkpointed" if e.outcome is Outcome.CHECKPOINTED else "stopped without a checkpoint"
            moved = job.stop_purpose in (P.RESIZE, P.MIGRATE)  # a resize or move is no preemption
            record_transition(s, job, S.PREEMPTED, now, f"{why}: {how} ({e.reason})",
                              preemptions=job.preemptions + (not moved), **common)
        else:
            self._worker_failed(s, job, f"{e.reason} [exit codes {codes}]", now, common,
                                EXIT_CANNOT_RUN in e.exit_codes.values())

    def _worker_failed(self, s: Writes, job: Job, why: str, now: float, common: dict[str, Any],
                       permanent: bool = False) -> None:
        """Retry from the last checkpoint after a backoff, or fail: after the job's
        ``max_retries``, and at once when the command can never run (a refused launch, or exit
        code 127: the command was not found or could not be executed; it never ran, so there is
        nothing to resume)."""
        failures, most = job.failures + 1, self._max_retries(job)
        if permanent:
            record_transition(s, job, S.FAILED, now, f"{why}; cannot run, not retried",
                              failures=failures, finished_at=now, target=None, **common)
        elif failures > most:
            record_transition(s, job, S.FAILED, now, f"{why}; gave up after {failures - 1} "
                              "retries", failures=failures, finished_at=now, target=None, **common)
        else:
            wait, when = self._backoff(failures, now)
            record_transition(s, job, S.PREEMPTED, now, f"{why}; retry {failures} of {most} "
                              f"from the last checkpoint{when}", failures=failures, target=None,
                              stop_purpose=P.RETRY, retry_at=now + wait if wait > 0 else None,
                              **common)

    def _refused_for_now(self, s: Writes, job: Job, why: str, now: float) -> None:
        """A launch the host refused for want of resources (it may succeed later): retried after
        the same backoff as a failure, not counted as one; after ``MAX_TRANSIENT_REFUSALS`` in a
        row the job fails."""
        refusals = job.refusals + 1
        if refusals > MAX_TRANSIENT_REFUSALS:
            record_transition(s, job, S.FAILED, now, f"{why}; the host refused {refusals} "
                              "launches in a row for want of resources, gave up",
                              refusals=refusals, finished_at=now, target=None)
            return
        wait, when = self._backoff(refusals, now)
        record_transition(s, job, S.PREEMPTED, now, f"{why}; the host is short of resources: "
                          f"retry{when} (refusal {refusals} of at most {MAX_TRANSIENT_REFUSALS} "
                          "in a row; not counted against max_retries)", refusals=refusals,
                          target=None, stop_purpose=P.RETRY,
                          retry_at=now + wait if wait > 0 else None)

    def _backoff(self, count: int, now: float) -> tuple[float, str]:
        """The wait before retry ``count`` (``retry_backoff_s`` doubled per earlier one, capped
        at ``retry_backoff_max_s``) and its words for the reason (" in 20 s, at 12:00:20 UTC")."""
        c = self.config
        wait = min(c.retry_backoff_s * 2.0 ** min(count - 1, 64), c.retry_backoff_max_s)
        if wait <= 0:
            return 0.0, ""
        return wait, f" in {wait:g} s, at {time.strftime('%H:%M:%S', time.gmtime(now + wait))} UTC"

    def _release(self, job: Job, now: float) -> None:
        """The job stops holding GPUs: settle its attained service and work (the simulator's
        progress model: ``perf.rate`` of what it held, for the time it held it)."""
        if job.holding_since is not None:
            held = load_alloc(job.allocation)
            dt = max(0.0, now - job.holding_since)
            job.run_s = (job.run_s or 0.0) + dt
            job.attained_gpu_s += held.num_workers * dt
            spec = self.cache.spec(job)
            job.work_done = min(spec.work, job.work_done + self.perf.rate(spec, held) * dt)
        job.holding_since = None
        job.slots = "{}"

    # -- measured times (``Attempt``) ----------------------------------------------------
    def _watch_first_steps(self, now: float) -> None:
        """Note the first step each new attempt reports of its own (its SDK report changed
        since the launch and says it is running): the end of its launch-to-first-step time.
        Read at most every ``WATCH_EVERY_S``; an attempt that reports nothing for
        ``WATCH_FOR_S`` after its launch (not an SDK job) is no longer watched."""
        if not self._unstepped or now < self._watch_at:
            return
        self._watch_at = now + WATCH_EVERY_S
        seen = []
        for (job_id, attempt), (before, launched) in list(self._unstepped.items()):
            if now - launched > WATCH_FOR_S:
                del self._unstepped[(job_id, attempt)]
                continue
            got = self.executor.status(str(job_id)) or {}
            step, state = got.get("step"), got.get("state")
            if isinstance(step, int) and state in ("running", "finished") \
                    and (state, step) != before:
                seen.append((job_id, attempt, {"first_step_at": now, "first_step": step}))
                del self._unstepped[(job_id, attempt)]
        if seen:
            self._marks += seen
            with self.store.session() as w:
                self._flush_marks(w)

    def _mark_end(self, job: Job, now: float, outcome: str) -> None:
        """The attempt ended: when, how, and the SDK's step then (None: it reports none)."""
        self._unstepped.pop((job.id, job.attempt), None)
        got = self.executor.status(str(job.id)) or {}
        step = got.get("step")
        self._marks.append((job.id, job.attempt, {
            "ended_at": now, "outcome": outcome, "end_step": step if isinstance(step, int) else None}))

    def _flush_marks(self, w: Session) -> None:
        """Write the measured times noted since the last write: one statement per set of
        columns, executed for all the attempts that set them (thousands of exits in a step
        cost one round trip each kind, not one each)."""
        if not self._marks:
            return
        w.flush()  # the attempts this transaction adds come first
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job_id, attempt, values in self._marks:
            groups.setdefault(tuple(sorted(values)), []).append(
                {"k_job": job_id, "k_attempt": attempt, **{f"v_{k}": v for k, v in values.items()}})
        for keys, rows in groups.items():
            stmt = update(Attempt).where(Attempt.job_id == bindparam("k_job"),
                                         Attempt.attempt == bindparam("k_attempt")).values(
                {k: bindparam(f"v_{k}") for k in keys})
            w.connection().execute(stmt, rows)
        self._marks = []

    # -- 2. operator requests --------------------------------------------------------------
    def _apply_requests(self, step: _Step, jobs: list[Job]) -> None:
        s, now = step.writes, step.now
        for job in jobs:
            if job.cancel_requested and job.stop_purpose != P.CANCEL:
                if job.state in HOLDING:
                    self._stop(step, job, P.CANCEL, reason="cancel requested")
                elif job.state not in TERMINAL:
                    record_transition(s, job, S.CANCELLED, now, "cancelled on request",
                                      finished_at=now)
            if job.preempt_requested:
                job.preempt_requested = False
                if job.state == S.RUNNING and self._finishing(job):
                    log.info("job %s: preempt not sent: the job is at its last step", job.id)
                elif job.state in (S.RUNNING, S.STARTING):
                    self._stop(step, job, P.OPERATOR, reason="preempt requested by operator")
            if job.to_cluster and not job.cancel_requested:
                self._move_out(step, job)

    def _move_out(self, step: _Step, job: Job) -> None:
        """A job moving to another cluster of the fleet gives up what it has here: a running
        job checkpoints, an admitted one loses its admission. Once it holds nothing here the
        fleet copies its checkpoint over (``runtime/fleet.py``)."""
        s, now, why = step.writes, step.now, f"moving to cluster {job.to_cluster}"
        if job.state in (S.RUNNING, S.STARTING):
            self._stop(step, job, P.MOVE, reason=why)
        elif job.state == S.CHECKPOINTING and job.stop_purpose not in (P.MOVE, P.CANCEL):
            job.stop_purpose, job.target = P.MOVE, None
        elif job.state == S.ADMITTED:
            record_transition(s, job, S.QUEUED, now, f"admission withdrawn: {why}", target=None)
        elif job.state == S.PREEMPTED and job.target:
            job.target = None

    def _stop(self, step: _Step, job: Job, purpose: StopPurpose, reason: str,
              target: Allocation | None = None) -> None:
        """Ask a job holding GPUs to checkpoint and stop (a cancel kills it instead)."""
        s, now = step.writes, step.now
        cols = {"stop_purpose": purpose, "stop_deadline": now + self.config.grace_s,
                    "target": dump_alloc(target) if target else None}
        if job.state == S.CHECKPOINTING:
            # Already stopping: the target changes, and the purpose only to a stronger one (a
            # preempt that the policy follows with a new placement stays a preempt).
            held = job.stop_purpose
            if held in STOP_STRENGTH and STOP_STRENGTH[purpose] < STOP_STRENGTH[StopPurpose(held)]:
                cols["stop_purpose"] = job.stop_purpose
            for k, v in cols.items():
                setattr(job, k, v)
        else:
            record_transition(s, job, S.CHECKPOINTING, now, reason, **cols)
            self._marks.append((job.id, job.attempt, {"stop_at": now}))
        step.effects.append(Stop(job.id, kill=purpose in _KILLS))

    # -- 2c. the jobs' bounds: retries due, time limits, hangs -------------------------------
    def _apply_bounds(self, step: _Step, jobs: list[Job]) -> bool:
        """Offer the policy again the failed jobs whose backoff is over; stop the running jobs
        past their time limit (checkpoint, then fail) and kill the hung ones (then retry).
        True if the policy's view changed."""
        now = step.now
        check_hangs = now >= self._hang_check_at
        if check_hangs:  # every eighth of the shortest hang timeout, at most once a second
            hangs = [h for j in jobs if j.state == S.RUNNING and (h := self._hang_s(j)) > 0]
            self._hang_check_at = now + max(HANG_CHECK_S, min(hangs, default=0.0) / 8)
            running = {j.id for j in jobs if j.state == S.RUNNING}
            self._seen = {i: v for i, v in self._seen.items() if i in running}
            active = {j.id for j in jobs}
            self._launched = {k: v for k, v in self._launched.items() if k[0] in active}
        changed = False
        for job in jobs:
            if job.state == S.PREEMPTED and job.retry_at is not None and job.retry_at <= now:
                job.retry_at = None
                changed = True
            if job.state != S.RUNNING or job.stop_purpose:
                continue
            limit = self._time_limit(job)
            if limit is not None and self._held_s(job, now) >= limit:
                self._stop(step, job, P.TIME, reason=f"time limit ({limit:g} s)")
                changed = True
                continue
            hung = self._hung(job, now) if check_hangs else None
            if hung is not None:
                self._stop(step, job, P.HUNG, reason=hung)
                changed = True
        return changed

    def _hung(self, job: Job, now: float) -> str | None:
        """Why ``job`` counts as hung, or None: its heartbeat (if it ever touched one), else its
        SDK step, has not changed for its ``hang_s``. An attempt is judged from its own first
        report on (its start -- importing a framework, loading a checkpoint -- takes what it
        takes; a report an earlier attempt left is not its own); one re-adopted after a restart,
        from when it was re-adopted (any report counts). A job that reports neither a step nor a
        heartbeat is never judged, nor one whose SDK says its steps are done (it is exiting)."""
        hang = self._hang_s(job)
        if not hang:
            return None
        report, mark = self._progress(job)
        seen = self._seen.get(job.id)
        if seen is None or seen.attempt != job.attempt:  # the attempt's first check
            before = self._launched.pop((job.id, job.attempt), (None, None))
            self._seen[job.id] = _Seen(job.attempt, mark, now, mark != before)
            return None
        if seen.mark != mark:
            self._seen[job.id] = _Seen(job.attempt, mark, now, True)
            return None
        quiet = now - seen.since
        if not seen.reported or quiet < hang or report.get("state") == "finished":
            return None  # (finished: its steps are done, it is on its way out)
        if mark[0] is not None:
            return f"hung: no heartbeat for {quiet:.0f} s"
        return f"hung: no step for {quiet:.0f} s (still at step {mark[1]})"

    def _progress(self, job: Job) -> tuple[Mapping[str, Any], tuple[object, object]]:
        """The job's last report (``Executor.status``) and its mark: (heartbeat, step)."""
        got = self.executor.status(str(job.id))
        report: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
        return report, (report.get("heartbeat_at"), report.get("step"))

    def _next_wake(self, jobs: list[Job], now: float) -> float:
        """When a step must run even if nothing else happens: a retry's backoff ends, a time
        limit is reached, or (while a job may hang) the next hang check."""
        times = [float("inf")]
        for job in jobs:
            if job.state == S.PREEMPTED and job.retry_at is not None:
                times.append(job.retry_at)
            elif job.state == S.RUNNING and not job.stop_purpose:
                limit = self._time_limit(job)
                if limit is not None:
                    times.append(now + limit - self._held_s(job, now))
                if self._hang_s(job):
                    times.append(self._hang_check_at)
        return min(times)

    def _bounds(self, job: Job) -> _Bounds:
        """What bounds ``job``'s workers: what it asked, else its user's default, never past
        its user's maximum (a maximum lowered since its submission applies)."""
        lim = self._user_limits(job)
        return _Bounds(memory_max=_least(job.memory_max, lim.job_memory_max),
                       pids_max=_least(job.pids_max, lim.job_pids_max),
                       log_max_bytes=lim.log_max_bytes, job_disk_max=lim.job_disk_max)

    def _user_limits(self, job: Job) -> UserLimits:
        if job.user_id not in self.cache.users:  # (before the first refresh: after a restart)
            self.cache.users = self.store.user_names()
        return self.config.limits.of(self.cache.users.get(job.user_id, ""))

    def _time_limit(self, job: Job) -> float | None:
        """Seconds ``job`` may hold GPUs over all its attempts (None: no limit)."""
        return _least(job.time_limit_s, self._user_limits(job).max_time_limit_s)

    def _held_s(self, job: Job, now: float) -> float:
        """Seconds ``job`` has held GPUs: its ended attempts and the current one."""
        held = job.run_s or 0.0
        return held + (max(0.0, now - job.holding_since) if job.holding_since is not None else 0.0)

    def _time_spent(self, job: Job) -> bool:
        limit = self._time_limit(job)
        return limit is not None and (job.run_s or 0.0) >= limit

    def _hang_s(self, job: Job) -> float:
        return self.config.hang_s if job.hang_s is None else job.hang_s

    def _max_retries(self, job: Job) -> int:
        return self.config.max_retries if job.max_retries is None else job.max_retries

    # -- 2b. operator pins -----------------------------------------------------------------
    def _apply_pins(self, step: _Step, jobs: list[Job]) -> None:
        """A pin (an admin's resize/migrate) moves a *running* job; a queued or paused job's pin
        waits until the policy admits it (the policy keeps admission)."""
        for job in jobs:
            if _pinned(job) and job.state == S.RUNNING and not job.stop_purpose \
                    and not self._finishing(job):  # (a job at its last step ends where it is)
                self._enact_pin(step, job)

    def _enact_pin(self, step: _Step, job: Job) -> None:
        current = load_alloc(job.allocation)
        avail = list(step.free)
        give(avail, current)
        want = self._pin_target(job, current, avail)
        if want is None or want == current:
            return  # already there, or waiting for capacity
        purpose = P.RESIZE if want.num_workers != current.num_workers else P.MIGRATE
        self._stop(step, job, purpose, reason=f"operator pin ({_pin_text(job)})", target=want)

    def _pin_target(self, job: Job, current: Allocation, avail: list[int]) -> Allocation | None:
        count = job.pin_workers or current.num_workers or job.gpus
        if job.pin_node is not None:
            try:
                node = self.cluster.index_of(job.pin_node.removeprefix(f"{self.member}/"))
            except KeyError:
                return None
            want = Allocation.of({node: count})
            return want if fits(want, avail) else None
        if current.num_workers == count:
            return current
        return pack(count, avail, prefer=current.nodes)

    # -- 3. the policy ---------------------------------------------------------------------
    def _apply_policy(self, step: _Step) -> None:
        s, jobs, now, report = step.writes, step.jobs, step.now, step.report
        # ``changed`` is complete (new, reloaded and modified rows since the last call), so
        # incremental policies may keep their index between calls of the same stream.
        changed = self._pending | self.cache.touched()
        self._pending = set()
        t = now - self.epoch
        plain = self.cache.plain()
        held_back = _held_back(self.cache.parallel())
        changed |= {str(i) for i in self._held_back - held_back}  # new to the policy
        self._held_back = held_back
        statuses = self.cache.statuses_of(
            [(i, j) for i, j in jobs.items() if (i in plain or _policy_sees(j)) and i not in held_back],
            t, self.executor)
        known = {st.job_id: st for st in statuses}
        mech = self.mechanism
        mech.ledger = self._ledger({j.id: j for j in self.cache.special()})  # plain: hold none
        decision = mech.decide(t, statuses, tuple(sorted(changed)), by_id=known,
                               stream=self.cache.stream, history=id(self), explain=True)
        report.plan_s, plan = decision.plan_s, decision.plan
        for j, text in plan.explain.items():
            if j in known and jobs[int(j)].decision != text:
                jobs[int(j)].decision = text
        for j, wait in plan.waiting.items():  # why it waits, for ``stint jobs`` and ``show``
            row = jobs.get(int(j)) if j in known else None
            if row is not None and row.state in (S.QUEUED, S.PREEMPTED) and not row.target \
                    and row.reason != str(wait):
                row.reason = str(wait)
        pinned = {j for j in plan.allocations if j in known and _pinned(jobs[int(j)])
                  and jobs[int(j)].state in HOLDING}
        ending = self._refuse_finishing(step, plan, known, pinned)
        if ending:
            plan = Plan({j: a for j, a in plan.allocations.items() if j not in ending},
                        {j: why for j, why in plan.reject.items() if j not in ending})
        named = [j for j in (*plan.allocations, *plan.reject) if j in known]  # (stage reads only these)
        staged, unknown = mech.stage(plan, known, pinned=pinned,
                                     has_run={j: jobs[int(j)].attempt > 0 for j in named})
        for why in unknown:
            text = f"policy {self.policy.name}: {why}"
            log.warning("%s", text)
            report.refusals.append(text)
            self.refused += 1
        for action, why in staged.refusals:
            self._refuse(report, action, why)
        for a in staged.actions:
            log.info("decision: policy %s: %s job %s: %s -> %s%s", self.policy.name, a.kind,
                     a.job_id, _where(self, a.before) or "nothing",
                     _where(self, a.after) or "nothing", f" ({a.reason})" if a.reason else "")
            self._apply_action(step, jobs[int(a.job_id)], a)
            s.add(Decision(job_id=int(a.job_id), at=now, kind=str(a.kind),
                           workers=a.after.num_workers, ps=a.after.num_ps))
            report.actions.append(a)
        free = sum(f for n, f in enumerate(mech.ledger.free_gpus) if n not in mech.ledger.down)
        started = {a.job_id for a in staged.actions}
        for st in statuses:  # a job the policy saw but gave no reason: the mechanism's own
            row = jobs[int(st.job_id)]
            if st.job_id not in started and st.job_id not in plan.reject \
                    and row.reason == SUBMITTED and row.state in (S.QUEUED, S.PREEMPTED):
                row.reason = str(unexplained_wait(st.spec, free, self.policy.name))
        self._forecast_stale = True

    def _refuse_finishing(self, step: _Step, plan: Plan, known: Mapping[str, JobStatus],
                          pinned: set[str]) -> set[str]:
        """The running jobs at their last step that ``plan`` would stop, resize, move or reject:
        refused (they end by themselves; a stop would save one step and cost a relaunch)."""
        ending: set[str] = set()
        for j in [*plan.allocations, *plan.reject]:
            if j not in known:  # the mechanism refuses it as unknown
                continue
            row, before = step.jobs[int(j)], known[j].allocation
            after = plan.allocations.get(j, before) if j not in plan.reject else None
            if j in pinned or j in ending or row.state != S.RUNNING or after == before \
                    or not self._finishing(row):
                continue
            ending.add(j)
            kind = ActionKind.REJECT if after is None else classify(before, after, True)
            self._refuse(step.report, Action(kind or ActionKind.MIGRATE, j, before, after or before),
                         Refusal(j, RefusalCode.FINISHING, "the job is at its last step"))
        return ending

    def _finishing(self, job: Job) -> bool:
        """Whether the job's SDK reports it at its last step or past it (``view.finishing``)."""
        return finishing(self._progress(job)[0], job.total_steps)

    def forecast(self, now: float) -> None:
        """Write each active job's estimated start (with its band) and finish
        (``sim.forecast``) when one is due: something changed ``forecast_s`` ago or more, or a
        waiting job's estimated start has passed (it is estimated again at once). A job holding
        GPUs is estimated to start now. Not news to the policy."""
        make = self.config.forecast_policy
        due = now - self._forecast_at >= self.config.forecast_s and self._forecast_stale
        passed = now >= self._passes_at and now - self._forecast_at >= PASSED_REFORECAST_S
        if make is None or not (due or passed):
            return
        from stint.sim.forecast import band, forecast

        jobs = self.cache.rows
        self._forecast_stale, self._passes_at = False, float("inf")
        if not jobs or len(jobs) > self.config.forecast_max_jobs:
            return
        self._forecast_at = now
        t = now - self.epoch
        statuses = [self.cache.status(i, j, t, self.executor) for i, j in jobs.items()
                    if _policy_sees(j)]
        fitted = self._fitted_costs(now)
        costs = fitted.costs if fitted is not None else None
        if costs is not None:
            statuses = [self._launch_left(jobs[int(st.job_id)], st, costs, now) for st in statuses]
        def typed() -> Policy:  # the forecast's policy: kept to the type rules, as the live one
            return wrap(make(), self.cluster)

        est = forecast(self.cluster, statuses, typed(), self.perf, t, costs)
        waiting = [st for st in statuses if not st.allocation]
        bands = band(self.cluster, statuses, typed, self.perf, t, fitted, est) \
            if waiting and len(statuses) <= BAND_MAX_JOBS else {}
        place = queue_positions([(st.job_id, est[st.job_id].order) for st in waiting])
        starts = [e.start_s for st in waiting if (e := est[st.job_id]).start_s is not None
                  and e.start_s > t]
        self._passes_at = self.epoch + min(starts) if starts else float("inf")
        self._write_estimates(statuses, est, bands, place)

    def _launch_left(self, job: Job, st: JobStatus, costs: CostModel, now: float) -> JobStatus:
        """A job launched and not yet at its first step makes no progress for the rest of its
        measured launch time: that much more work left, for the forecast."""
        got = self._unstepped.get((job.id, job.attempt))
        if got is None or not st.allocation or st.rate <= 0:
            return st
        cost = costs.resume_s if job.first_start_at is not None and job.attempt > 1 else costs.start_s
        left = cost - (now - got[1])
        if left <= 0:
            return st
        return replace(st, spec=replace(st.spec, work=st.spec.work + left * st.rate))

    def _write_estimates(self, statuses: list[JobStatus], est: Mapping[str, Estimate],
                         bands: Mapping[str, tuple[float | None, float | None]],
                         place: Mapping[str, int]) -> None:
        # Written straight to the store, not through the cached rows: those may hold this step's
        # lifecycle changes, which an executor's report (a launch) has already moved past.
        def wall(x: float | None) -> float | None:
            return None if x is None else self.epoch + x

        rows = []
        for st in statuses:
            e = est[st.job_id]
            lo, hi = bands.get(st.job_id, (None, None))
            rows.append((int(st.job_id), {
                "est_start_at": wall(e.start_s), "est_finish_at": wall(e.finish_s),
                "est_start_lo_at": wall(lo), "est_start_hi_at": wall(hi),
                "queue_position": place.get(st.job_id)}))
        with self.store.session() as w:
            update_jobs(w, rows)

    def _fitted_costs(self, now: float) -> FittedCosts | None:
        """The live cost model fitted from this store's last attempts, refitted every
        ``COSTS_REFIT_S`` (None: nothing measured yet; the forecast charges no costs)."""
        if now - self._costs_at >= COSTS_REFIT_S:
            self._costs_at = now
            fitted = fitted_costs(self.store, limit=COSTS_SAMPLE)
            self._costs = fitted if any(fitted.samples.values()) else None
        return self._costs

    def _ledger(self, jobs: Mapping[int, Job]) -> Ledger:
        """The capacity ledger as policies see it: every active job's logical allocation, and
        the nodes that are down (nothing may be placed there)."""
        ledger = Ledger(self.cluster)
        for job in jobs.values():
            alloc = logical_allocation(job)
            if alloc:
                ledger.take(self.cache.spec(job), alloc)
        for node in self._nodes_down():
            ledger.set_down(node, True)
        return ledger

    def _nodes_down(self) -> frozenset[int]:
        names = self.executor.down_nodes()
        return frozenset(i for i, n in enumerate(self.cluster.nodes) if n.name in names)

    def _refuse(self, report: StepReport, action: Action, why: Refusal) -> None:
        text = f"policy {self.policy.name}: {action.kind} refused: {why}"
        log.warning("%s", text)
        report.refusals.append(text)
        self.refused += 1

    def _apply_action(self, step: _Step, job: Job, a: Action) -> None:
        """Turn one accepted action into intents (see the module docstring, step 4)."""
        s, now = step.writes, step.now
        reason = f"policy {self.policy.name}: {a.kind}" + (f" ({a.reason})" if a.reason else "")
        holding = job.state in HOLDING
        if a.kind is ActionKind.REJECT:
            if holding:
                self._stop(step, job, P.REJECT, reason=reason)
            else:
                if job.state == S.ADMITTED:
                    record_transition(s, job, S.QUEUED, now, "admission withdrawn", target=None)
                record_transition(s, job, S.REJECTED, now, reason, finished_at=now, target=None)
        elif holding:
            target = a.after or None
            purpose = P.PREEMPT if target is None else P.RESIZE if (
                a.after.num_workers != load_alloc(job.allocation).num_workers) else P.MIGRATE
            self._stop(step, job, purpose, reason=reason, target=target)
        elif not a.after:  # a job waiting to launch loses its target
            job.target = None
            if job.state == S.ADMITTED:
                record_transition(s, job, S.QUEUED, now, f"{reason}: admission withdrawn")
        else:  # START or RESUME: reserve the target; it launches once the GPUs are free
            if job.state == S.QUEUED:
                record_transition(s, job, S.ADMITTED, now, reason, target=dump_alloc(a.after))
            else:
                job.target = dump_alloc(a.after)
                job.reason, job.stop_purpose = reason, None
            step.targeted.append(job)

    # -- 4. launching what has a target ----------------------------------------------------
    def _launch_targets(self, step: _Step, jobs: list[Job]) -> None:
        """Launch every job that waits with a target, once its GPUs are physically free (the
        jobs a plan stopped to make room hold them until their exit)."""
        for job in jobs:
            if job.target and job.state in (S.ADMITTED, S.PREEMPTED) and not (
                    job.cancel_requested or job.to_cluster):
                target = load_alloc(job.target)
                if fits(target, step.free):
                    moved = job.state == S.PREEMPTED and job.stop_purpose in (P.RESIZE, P.MIGRATE)
                    why = f"{job.stop_purpose} after the checkpoint" if moved else job.reason
                    self._launch(step, job, target, why)

    # -- 5. intents ------------------------------------------------------------------------
    def _launch(self, step: _Step, job: Job, alloc: Allocation, reason: str) -> None:
        """Write the intent to run ``job`` on ``alloc`` as a new attempt (via the lifecycle's
        intermediate state), reserve its GPUs and slots, and queue the launch."""
        s, now = step.writes, step.now
        if job.state == S.QUEUED:
            record_transition(s, job, S.ADMITTED, now, reason)
        elif job.state == S.PREEMPTED:
            kind = classify(load_alloc(job.allocation), alloc, True)
            via = {ActionKind.RESIZE: S.RESIZING, ActionKind.MIGRATE: S.MIGRATING}.get(
                kind or ActionKind.RESUME, S.RESUMED)
            record_transition(s, job, via, now, reason)
        slots = assign_slots(alloc, self.capacity, step.held)
        step.held.append(slots)
        take(step.free, alloc)
        job.attempt += 1
        s.add(Attempt(job_id=job.id, attempt=job.attempt, workers=alloc.num_workers,
                      resumed=job.first_start_at is not None, launched_at=now))
        report = self.executor.status(str(job.id)) or {}
        self._unstepped[(job.id, job.attempt)] = ((report.get("state"), report.get("step")), now)
        if self._hang_s(job):  # what an earlier attempt left is not this one's report
            self._launched[(job.id, job.attempt)] = self._progress(job)[1]
        record_transition(
            s, job, S.STARTING, now, f"attempt {job.attempt} on {_where(self, alloc)}",
            allocation=dump_alloc(alloc), slots=json.dumps(slots), holding_since=now,
            first_start_at=job.first_start_at if job.first_start_at is not None else now,
            stop_purpose=None, target=None,
        )
        step.effects.append(self._launch_effect(job, slots))

    def _launch_effect(self, job: Job, slots: dict[int, list[int]]) -> Launch:
        """The attempt's tasks: a worker per held slot and, where its allocation places
        parameter servers, a PS per one placed (ranks after the workers', no slot)."""
        job_dir = self.config.jobs_dir / str(job.id)
        command = tuple(json.loads(job.command))
        pairs = [(node, slot) for node in sorted(slots) for slot in slots[node]]
        ps_nodes = [node for node, c in load_alloc(job.allocation).ps for _ in range(c)]
        bounds = self._bounds(job)
        size = len(pairs) + len(ps_nodes)
        env = _task_env(job, len(pairs), len(ps_nodes))

        def task(rank: int, node: int, slots: tuple[int, ...], extra: dict[str, str]) -> WorkerLaunch:
            return WorkerLaunch(
                job_id=str(job.id), attempt=job.attempt, rank=rank, world_size=size,
                logical_world_size=logical_world_size(job), node=self.cluster.nodes[node].name,
                slots=slots, command=command, ckpt_dir=str(job_dir / "ckpt"),
                log_path=str(job_dir / "log.txt"), os_user=job.os_user, cwd=job.cwd,
                env={**env, **extra}, job_dir=str(job_dir),
                memory_max=bounds.memory_max, pids_max=bounds.pids_max,
                log_max_bytes=bounds.log_max_bytes, disk_max_bytes=bounds.job_disk_max,
            )

        tasks = [task(rank, node, (slot,), {"STINT_ROLE": "worker"} if ps_nodes else {})
                 for rank, (node, slot) in enumerate(pairs)]  # one accelerator slot per worker
        tasks += [task(len(pairs) + k, node, (), {"STINT_ROLE": "ps", "STINT_PS_RANK": str(k)})
                  for k, node in enumerate(ps_nodes)]
        return Launch(job.id, job.attempt, tuple(tasks))

    # -- 6. enacting -----------------------------------------------------------------------
    def _enact(self, effects: list[Effect], now: float, report: StepReport) -> None:
        for eff in effects:
            if isinstance(eff, Stop):
                if eff.kill:
                    self.executor.kill(str(eff.job_id))
                    log.info("enacted: job %s killed", eff.job_id)
                else:
                    self.executor.request_stop(str(eff.job_id), self.config.grace_s)
                    log.info("enacted: job %s asked to checkpoint and stop (SIGTERM after "
                             "%g s)", eff.job_id, self.config.grace_s)
                report.stopped.append(eff.job_id)
        for eff in effects:
            if isinstance(eff, Launch):
                self._enact_launch(eff, now)
                report.launched.append(eff.job_id)

    def _enact_launch(self, eff: Launch, now: float) -> None:
        """Launch one attempt; a refusal by the executor fails that job alone (at once if it can
        never succeed, else as a worker failure), never the step."""
        error, permanent, transient = None, False, False
        try:
            if self.config.multi_user and (why := launch_refusal(self.store, eff.job_id)):
                raise LaunchError(why)  # (never root for a non-admin, never "no account")
            (self.config.jobs_dir / str(eff.job_id)).mkdir(parents=True, exist_ok=True)
            self.executor.launch(eff.workers)
        except LaunchError as exc:
            error, permanent, transient = str(exc), not exc.transient, exc.transient
        except ExecutorError as exc:  # anything else escapes the step: ``recover`` redoes it
            error = str(exc)
        if error is not None:
            log.warning("job %s attempt %s: launch refused: %s", eff.job_id, eff.attempt, error)
            self._launch_failed = True  # like an attempt that ended by itself: the policy is asked
        with self.store.session() as s:
            job = s.get(Job, eff.job_id)
            if job is None or job.attempt != eff.attempt or job.state != S.STARTING:
                return
            if error is None:
                record_transition(s, job, S.RUNNING, now, f"attempt {eff.attempt} launched",
                                  refusals=0)
                log.info("enacted: job %s attempt %s launched: %d worker(s) on %s", eff.job_id,
                         eff.attempt, len(eff.workers),
                         ", ".join(sorted({w.node for w in eff.workers})))
            elif transient:
                self._refused(s, job, now)
                self._refused_for_now(s, job, f"launch refused: {error}", now)
            else:
                self._refused(s, job, now)
                self._worker_failed(s, job, f"launch refused: {error}", now, {}, permanent)

    def _refused(self, s: Session, job: Job, now: float) -> None:
        """A launch refused: the attempt ends at once (measured as such) and frees its GPUs."""
        self._unstepped.pop((job.id, job.attempt), None)
        s.execute(update(Attempt).where(Attempt.job_id == job.id, Attempt.attempt == job.attempt)
                  .values(ended_at=now, outcome="refused"))
        self._release(job, now)

    # -- helpers ---------------------------------------------------------------------------
    def _active(self, s: Session) -> dict[int, Job]:
        q = select(Job).where(Job.state.not_in([str(t) for t in TERMINAL])).order_by(Job.id)
        if self.member:
            q = q.where(Job.cluster == self.member)
        return {j.id: j for j in s.scalars(q)}

    def _free(self, jobs: list[Job]) -> list[int]:
        free = list(self.capacity)
        for job in jobs:
            if job.state in HOLDING:
                take(free, load_alloc(job.allocation))
        return free


@dataclass(frozen=True, slots=True)
class _Seen:
    """A running attempt's last progress report (heartbeat time, SDK step), since when the
    controller has seen it unchanged, and whether the attempt reported it itself (not a report
    left by an earlier attempt)."""

    attempt: int
    mark: tuple[object, object]
    since: float
    reported: bool


@dataclass(frozen=True, slots=True)
class _Bounds:
    """What the executor enforces on one job's workers (None: no bound)."""

    memory_max: int | None
    pids_max: int | None
    log_max_bytes: int | None
    job_disk_max: int | None


_N = TypeVar("_N", int, float)


def _least(asked: _N | None, most: _N | None) -> _N | None:
    """The smaller of a job's own bound and its user's (either None: the other)."""
    if asked is None:
        return most
    return asked if most is None else min(asked, most)


def queue_positions(waiting: list[tuple[str, int | None]]) -> dict[str, int]:
    """Queue positions (1 = next) of the waiting jobs, given in arrival order with their place
    among the forecast's starts (``Estimate.order``): the order their policy, replayed forward,
    starts them in; the jobs it does not start within its horizon come last, by arrival."""
    ranked = sorted(range(len(waiting)), key=lambda i: (
        waiting[i][1] is None, waiting[i][1] or 0, i))
    return {waiting[i][0]: place for place, i in enumerate(ranked, 1)}


def _task_env(job: Job, workers: int, servers: int) -> dict[str, str]:
    """The job's own environment, a task of an array its index (``STINT_ARRAY_INDEX``), a
    parameter-server job its worker and server counts: with ``servers`` placed by the plan,
    ``STINT_WORLD_SIZE`` (the workers alone: the executor's counts every task) and
    ``STINT_PS_COUNT``; without, ``STINT_PS_COUNT`` of ``ps_count`` (its worker 0 starts them)."""
    env: dict[str, str] = json.loads(job.env or "{}")
    if job.array_index is not None:
        env["STINT_ARRAY_INDEX"] = str(job.array_index)
    if servers:
        env.update(STINT_WORLD_SIZE=str(workers), STINT_PS_COUNT=str(servers))
    elif job.ps_count is not None:
        env["STINT_PS_COUNT"] = str(job.ps_count)
    return env


def _held_back(jobs: dict[int, Job]) -> set[int]:
    """The tasks of job arrays the policy does not see yet: past an array's ``array_parallel``,
    its never-started queued tasks but the first ones in index order that fit beside those that
    have started and not finished (which keep their place whatever they do next)."""
    arrays: dict[int, tuple[int, list[Job]]] = {}
    for job in jobs.values():
        if job.array_parallel is None or job.array_id is None or job.state in TERMINAL:
            continue
        started, waiting = arrays.get(job.array_id, (0, []))
        if job.state == S.QUEUED and job.first_start_at is None and not job.target:
            waiting.append(job)
        else:
            started += 1
        arrays[job.array_id] = (started, waiting)
    held: set[int] = set()
    for started, waiting in arrays.values():
        parallel = waiting[0].array_parallel if waiting else None
        if parallel is None:
            continue
        waiting.sort(key=lambda j: (j.array_index or 0, j.id))
        held.update(j.id for j in waiting[max(0, parallel - started):])
    return held


def _exited(exits: list[JobExit]) -> list[int]:
    """The job ids of ``exits`` (an exit of a worker not started as a job's has none)."""
    return [int(e.job_id) for e in exits if e.job_id.isdigit()]


def _policy_sees(job: Job) -> bool:
    """Jobs the policy sees: every active job but those being cancelled or stopped for good,
    and failed ones waiting for their retry.
    (A job checkpointing for a resize or migration is seen on its target; a pinned one is seen,
    and the plan may not move it.)"""
    if job.state in TERMINAL or job.cancel_requested or job.to_cluster or job.retry_at is not None:
        return False  # (a failed job waiting out its backoff comes back when the wait is over)
    return not (job.state == S.CHECKPOINTING and job.stop_purpose in ENDING_STOPS)


_NOTES = NOTE_COLUMNS


def _expected(job: Job | None, e: JobExit) -> bool:
    """An exit the controller caused: a checkpoint (or kill) its plan asked for (not one an
    operator asked for, nor one of a bound -- a time limit, a hang: the policy has not planned
    what follows it)."""
    return (job is not None and job.attempt == e.attempt and job.state == S.CHECKPOINTING
            and e.outcome in (Outcome.CHECKPOINTED, Outcome.STOPPED)
            and job.stop_purpose not in (P.OPERATOR, P.TIME, P.HUNG))


def _pinned(job: Job) -> bool:
    return job.pin_workers is not None or job.pin_node is not None


def _pin_text(job: Job) -> str:
    parts = []
    if job.pin_workers is not None:
        parts.append(f"workers={job.pin_workers}")
    if job.pin_node is not None:
        parts.append(f"node={job.pin_node}")
    return ", ".join(parts)


_NOTABLE = frozenset({*TERMINAL, S.PREEMPTED})  # transitions logged at INFO (others: DEBUG)


def _where(ctl: Controller, alloc: Allocation) -> str:
    """``node-0x2 node-1x1``; with parameter servers ``... + ps node-2x1``."""
    prefix = f"{ctl.member}/" if ctl.member else ""
    text = " ".join(f"{prefix}{ctl.cluster.nodes[n].name}x{c}" for n, c in alloc.workers)
    if alloc.ps:
        text += " + ps " + " ".join(f"{prefix}{ctl.cluster.nodes[n].name}x{c}" for n, c in alloc.ps)
    return text


def _worst(codes: Mapping[int, int]) -> int | None:
    """The first non-zero exit code, else 0 (None if no worker exited)."""
    values = list(codes.values())
    nonzero = [c for c in values if c != 0]
    return nonzero[0] if nonzero else (0 if values else None)
