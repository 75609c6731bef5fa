"""The event-driven simulation engine: the simulator's mechanism.

Between events every job progresses at a constant rate given by its allocation and the
performance model, so nothing is simulated in idle stretches. Per event the engine does
O(changed jobs) work: progress is kept lazily on each ``JobStatus`` (``as_of_s``/``rate``) and
settled only when a job's allocation changes or it completes; the policy sees the live job table
(``ClusterView.by_id``) plus the list of jobs that changed, never a rebuilt copy.

At each distinct event time: completions, node failures/recoveries, arrivals, finished action
delays and slot ticks are applied, then the policy is called once, its plan is staged on the
capacity ledger (``stint.reconcile.stage``, the same step the live controller uses), and each
accepted action is enacted with its modelled delay (``CostModel``). Actions the ledger refuses
(over capacity, a node down, a worker count the job cannot run on) are counted in
``RunResult.refusals`` with their reasons, and their jobs keep their allocation.

A daily inference reservation (``reservation``, ``stint.sim.reservation``) takes whole nodes the
way a failure does: the node's jobs are shrunk onto their other nodes where they can run there,
else preempted, and the node shows as down until its slot ends; the reserved GPUs over time are
``RunResult.reserved``.
"""

from __future__ import annotations

import heapq
import math
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stint.mechanism import Mechanism
from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.model import PerfModel
from stint.placement.packing import packed
from stint.placement.types import allowed_types, packed_on
from stint.policies.base import JobStatus, Phase, Policy
from stint.policies.knowledge import Knowledge
from stint.reconcile import Action, ActionKind
from stint.sim.costs import CostModel
from stint.sim.events import Event, EventKind
from stint.sim.metrics import JobRecord, RunResult

if TYPE_CHECKING:
    from stint.sim.reservation import Reservation, Span


@dataclass(slots=True)
class _Track:
    """Engine-private bookkeeping for one active job."""

    version: int = 0
    migrations: int = 0
    resizes: int = 0
    allocations: int = 0  # actions that gave it GPUs so far (start, resume, resize, migrate)


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """Node ``node`` is down from ``down_s`` to ``up_s``."""

    node: int
    down_s: float
    up_s: float


class _ActiveJobs(Sequence[JobStatus]):
    """A read-only, arrival-ordered view of the engine's job table (no copy per call)."""

    def __init__(self, table: dict[str, JobStatus]) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def __iter__(self) -> Iterator[JobStatus]:
        return iter(self._table.values())

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        return list(self._table.values())[i]


@dataclass
class Simulator:
    """Replays ``jobs`` on ``cluster`` under ``policy``. ``run()`` returns the metrics."""

    cluster: Cluster
    jobs: Sequence[JobSpec]
    policy: Policy
    perf: PerfModel
    costs: CostModel = field(default_factory=CostModel)
    failures: Sequence[NodeFailure] = ()
    on_progress: Callable[[int, int], None] | None = None
    # If set, the policy is called only every ``decision_period_s`` seconds (Pollux's simulator
    # re-plans every 60 s); arrivals and completions in between wait for the next period.
    decision_period_s: float | None = None
    # Called with (time, action) for every action of a plan the engine carries out (the parity
    # test compares them with the live controller's); a node failure's preemptions are events,
    # not actions, and are not reported.
    on_action: Callable[[float, Action], None] | None = None
    # Start from a state instead of an empty cluster (a forecast from the live system): these
    # jobs are active at ``start_s`` with their allocation and progress; ``jobs`` arrive later.
    resume_from: Sequence[JobStatus] = ()
    start_s: float | None = None
    # Stop at this time (a forecast's horizon): jobs still active then are left unfinished.
    end_s: float = math.inf
    # A daily capacity reservation (nodes taken back at peak hours), enacted like node failures.
    reservation: Reservation | None = None
    # What policies may know of each job's length (``stint.policies.knowledge``): declared (the
    # user's ``est_s``, else the user-history estimate) by default; oracle for studies.
    knowledge: Knowledge = field(default_factory=Knowledge)
    # Measured delays (``stint replay``): per job, the seconds without progress after its first,
    # second, ... action that gives it GPUs, as a live run measured them; they replace the cost
    # model's (and the stop wait) for those actions (None, or past the list: the cost model's).
    measured_delays: Mapping[str, Sequence[float | None]] | None = None

    def __post_init__(self) -> None:
        self._specs = sorted(self.jobs, key=lambda s: s.arrival_s)
        ids = {s.job_id for s in self._specs}
        if len(ids) != len(self._specs):
            raise ValueError("job ids must be unique")
        self._mech = Mechanism(self.cluster, self.policy, self.perf)
        self._ledger = self._mech.ledger  # the capacity after every accepted action
        self._refusals: list[str] = []
        self._table: dict[str, JobStatus] = {}
        self._track: dict[str, _Track] = {}
        self._heap: list[Event] = []
        self._seq = 0
        self._changed: dict[str, None] = {}
        self._unordered = False  # a job older than the table's last entered it (``_insert``)
        self._records: list[JobRecord] = []
        self._waiting = 0
        self._busy_gpu_s = 0.0
        self._busy_by_type: dict[str, float] = dict.fromkeys(self.cluster.types, 0.0)
        self._mechanism_gpu_s = 0.0  # GPU-seconds held without progress: modelled action delays
        self._last_t = 0.0
        self._tick_at: float | None = None
        self._series: tuple[array[float], array[float], array[float]] = (
            array("d"),
            array("d"),
            array("d"),
        )
        self._latency = array("d")
        self._ideal_rate: dict[object, float] = {}
        self._total_gpus = self.cluster.total_gpus  # computed once: the cluster never changes
        self._node_gpus = int(max((c[0] for c in self._ledger.capacity), default=0))
        self._period_at: float | None = None
        self._stream = id(self)
        self._failed: set[int] = set()  # nodes down by failure
        self._reserved: dict[int, int] = {}  # reservation slot -> the node it holds
        self._spans: Iterator[Span] | None = None
        self._next_span: Span | None = None  # the span whose RESERVE event is pending
        self._node_order: list[int] = []  # the reservation's seeded tie-break among nodes
        self._spans_live = True  # the reservation's cycle goes on (``_push_span``)
        self._busy_at_window = -1.0  # busy GPU-seconds when the last day's window opened
        self._reserved_series: tuple[array[float], array[float]] = (array("d"), array("d"))
        self.events = 0  # events handled so far (arrivals included)
        self._estimates: dict[str, tuple[float, str]] = {}  # job -> (estimate s, its source)
        self._free_before: list[int] | None = None  # free GPUs before the plan being enacted

    # ----------------------------------------------------------------------------------- run
    def run(self) -> RunResult:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        specs, n, ai = self._specs, len(self._specs), 0
        for f in self.failures:
            self._push(f.down_s, EventKind.NODE_DOWN, str(f.node))
            self._push(f.up_s, EventKind.NODE_UP, str(f.node))
        start = specs[0].arrival_s if specs else 0.0
        if self.start_s is not None:
            start = self.start_s
            self._preload(start)
        self._last_t = start
        self.events = 0
        if self.reservation is not None:
            self._spans = self.reservation.spans(start, self.cluster.num_nodes)
            self._node_order = self.reservation.node_order(self.cluster.num_nodes)
            self._push_span()
        while ai < n or self._heap:
            t = min(specs[ai].arrival_s if ai < n else math.inf, self._heap[0][0] if self._heap else math.inf)
            if t == math.inf or t > self.end_s:
                break
            first = ai
            while ai < n and specs[ai].arrival_s == t:
                ai += 1
            self.step(t, specs[first:ai])
            if self.on_progress is not None and self.events % 4096 == 0:
                self.on_progress(len(self._records), n)
        if self._table:  # only jobs that can never run are left (e.g. the policy never admits them)
            for st in list(self._table.values()):
                self._finish(st, self._last_t, rejected="never scheduled")
        if self.on_progress is not None:
            self.on_progress(len(self._records), n)
        return RunResult(
            policy=self.policy.name,
            records=self._records,
            total_gpus=self.cluster.total_gpus,
            busy_gpu_s=self._busy_gpu_s,
            start_s=start,
            end_s=self._last_t,
            series=self._series,
            latencies_s=self._latency,
            events=self.events,
            wall_s=time.perf_counter() - wall0,
            cpu_s=time.process_time() - cpu0,
            refusals=self._refusals,
            mechanism_gpu_s=self._mechanism_gpu_s,
            reserved=self._reserved_series,
            busy_by_type=self._busy_by_type,
            gpus_by_type={t: self.cluster.gpus_of(t) for t in self.cluster.types},
        )

    def step(self, t: float, arrivals: Sequence[JobSpec], returning: Sequence[JobStatus] = ()) -> None:
        """Everything at event time ``t``: its events, then ``arrivals`` and ``returning``, then
        the policy once (if anything happened), then the next tick. ``run`` calls it per event
        time; a fleet of clusters on one clock calls it for each cluster.

        ``returning`` are jobs with a past elsewhere (a fleet's job moved in from another
        cluster): each enters at ``t`` holding nothing, with its status's history — the spec as
        submitted (its original ``arrival_s``, which the policy reads for queue age, SLA and
        response ratio), work done, attained service, first start, preemptions — as the live
        store's row of a moved job is the same row. An arrival may be older than jobs already
        in the table (``arrival_s`` before ``t``): the table is kept in arrival order."""
        self._advance(t)
        dirty = False
        while self._heap and self._heap[0][0] == t:
            dirty |= self._handle(heapq.heappop(self._heap), t)
            self.events += 1
        for spec in arrivals:
            self._arrive(spec, t)
            self.events += 1
            dirty = True
        for old in returning:
            self._resume(old, t)
            self.events += 1
            dirty = True
        if self._unordered:
            self._reorder()
        if dirty and self._table:
            if self.decision_period_s is None or self._on_period(t):
                self._decide(t)
            elif self._period_at is None:
                self._period_at = (math.floor(t / self.decision_period_s) + 1) * self.decision_period_s
                self._push(self._period_at, EventKind.TICK, "")
        self._schedule_tick(t)

    # -------------------------------------------------------------------------------- events
    def _push(self, t: float, kind: EventKind, job_id: str, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, int(kind), self._seq, kind, job_id, version))

    def _advance(self, t: float) -> None:
        dt = t - self._last_t
        if dt > 0:
            self._busy_gpu_s += self._ledger.used_gpus * dt
            if self._busy_by_type:
                for kind, used in self._ledger.used_by_type.items():
                    self._busy_by_type[kind] += used * dt
            self._last_t = t

    def _handle(self, ev: Event, t: float) -> bool:
        _, _, _, kind, job_id, version = ev
        if kind is EventKind.TICK:
            if self._tick_at is not None and t >= self._tick_at:
                self._tick_at = None
            if self._period_at is not None and t >= self._period_at:
                self._period_at = None  # the decision wake-up has fired, even if no job is left
            return True
        if kind is EventKind.NODE_DOWN or kind is EventKind.NODE_UP:
            self._node_event(int(job_id), t, down=kind is EventKind.NODE_DOWN)
            return True
        if kind is EventKind.RESERVE or kind is EventKind.UNRESERVE:
            self._reservation_event(int(job_id), t, take=kind is EventKind.RESERVE)
            return True
        st = self._table.get(job_id)
        if st is None or self._track[job_id].version != version:
            return False  # stale: the job's rate changed or it finished since
        self._settle(st, t)
        if kind is EventKind.COMPLETION:
            self._release(st)
            self._finish(st, t)
        else:  # ACTION_DONE
            self._set_rate(st, t, self.perf.rate(st.spec, st.allocation))
        self._changed[job_id] = None
        return True

    def _preload(self, t: float) -> None:
        """``resume_from`` as the active jobs at ``t``; the policy is asked at ``t``."""
        for old in self.resume_from:
            self._resume(old, t, old.allocation)
        self._push(t, EventKind.TICK, "")

    def _resume(self, old: JobStatus, t: float, allocation: Allocation = EMPTY) -> None:
        """``old`` active from ``t`` with its history (progress as of ``t``, first start,
        preemptions, last change), holding ``allocation`` if it fits, else waiting."""
        st = JobStatus(spec=old.spec, phase=old.phase, work_done=old.work_done_at(t),
                       attained_gpu_s=old.attained_gpu_s_at(t), first_start_s=old.first_start_s,
                       last_change_s=old.last_change_s, preemptions=old.preemptions, as_of_s=t,
                       est_work=old.est_work)  # what was known of it stays known
        self._insert(st)
        if allocation and self._ledger.fits(st.spec, allocation):
            self._ledger.take(st.spec, allocation)
            st.allocation = allocation
            self._set_rate(st, t, self.perf.rate(st.spec, st.allocation))
        else:
            st.phase = Phase.QUEUED if st.first_start_s is None else Phase.PAUSED
            self._waiting += 1

    def _arrive(self, spec: JobSpec, t: float) -> None:
        self._insert(JobStatus(spec=spec, last_change_s=t, as_of_s=t, est_work=self._est_work(spec)))
        self._waiting += 1

    def _est_work(self, spec: JobSpec) -> float:
        """The job's length as policies may know it (the one place a simulated job's knowledge
        is set), in work units: the estimate's seconds at the requested size x the rate there."""
        est_s, source = self.knowledge.estimate_s(spec)
        if est_s is None:
            self._estimates[spec.job_id] = (self._requested_ideal_s(spec), str(source))
            return spec.work
        self._estimates[spec.job_id] = (est_s, str(source))
        rate = self._requested_rate(spec)
        return est_s * rate if rate > 0 else spec.work

    def _insert(self, st: JobStatus) -> None:
        """Add an active job; note when it arrived before the table's last (``_reorder``)."""
        last = next(reversed(self._table.values()), None)
        if last is not None and st.spec.arrival_s < last.spec.arrival_s:
            self._unordered = True
        self._table[st.job_id] = st
        self._track[st.job_id] = _Track()
        self._changed[st.job_id] = None

    def _reorder(self) -> None:
        """Put the table back in arrival order (stable: ties keep their order), in place."""
        jobs = sorted(self._table.items(), key=lambda kv: kv[1].spec.arrival_s)
        self._table.clear()
        self._table.update(jobs)
        self._unordered = False

    def _on_period(self, t: float) -> bool:
        """With a decision period: is ``t`` a decision instant? (Then the pending one is used up.)"""
        assert self.decision_period_s is not None
        periods = t / self.decision_period_s
        if abs(periods - round(periods)) <= 1e-9 * max(1.0, periods):  # 3 x 0.1 is 0.30000000000000004
            if self._period_at is not None and t >= self._period_at:
                self._period_at = None
            return True
        return False

    def _schedule_tick(self, t: float) -> None:
        """Keep one slot tick pending while it can matter.

        Ticks fall on multiples of ``tick_s`` while jobs are active. A policy may say when its
        next time-driven change is due (``next_due()``, e.g. Tiresias' next demotion, or None for
        never): then ticks before it are skipped, since they could not change its plan.
        """
        if not self._table:
            return
        at = self._mech.next_tick(t)
        if at is not None and (self._tick_at is None or at < self._tick_at):
            self._tick_at = at
            self._push(at, EventKind.TICK, "")

    # ------------------------------------------------------------------------------ decisions
    def _decide(self, t: float) -> None:
        # A policy that reads ``work_done``/``attained_gpu_s`` directly gets them settled to now
        # (O(active jobs)); the baselines read ``*_at(now)`` and declare ``lazy_progress``.
        decision = self._mech.decide(t, _ActiveJobs(self._table), list(self._changed),
                                     by_id=self._table, stream=self._stream, history=self._stream)
        self._changed.clear()
        self._latency.append(decision.plan_s)
        plan = decision.plan
        if not plan.is_empty():
            self._enact(plan, t)
        s_t, s_busy, s_queue = self._series
        s_t.append(t)
        s_busy.append(self._ledger.used_gpus)
        s_queue.append(self._waiting)

    def _enact(self, plan: Plan, t: float) -> None:
        table = self._table
        named = [*plan.allocations, *plan.reject]
        for j in named:  # settle before the actions change what the jobs hold
            if j in table:
                self._settle(table[j], t)
        # With a stop cost, a job placed on GPUs this plan frees by a stop waits for it.
        self._free_before = list(self._ledger.free_gpus) if self.costs.stop_s > 0 else None
        staged, unknown = self._mech.stage(plan, table)
        for why in unknown:
            self._refusals.append(f"t={t:g} policy {self.policy.name}: {why}")
        for action, why in staged.refusals:
            self._refusals.append(f"t={t:g} {action.kind} refused: {why}")
        for action in staged.actions:
            self._apply(action, t)
        self._free_before = None
        for j in plan.allocations:
            if j in table:
                self._changed[j] = None

    def _apply(self, action: Action, t: float) -> None:
        if self.on_action is not None:
            self.on_action(t, action)
        self._apply_action(action, t)

    def _apply_action(self, action: Action, t: float) -> None:
        st = self._table[action.job_id]
        kind = action.kind
        self._settle(st, t)
        if kind is ActionKind.REJECT:
            st.allocation = EMPTY
            self._finish(st, t, rejected=action.reason or "rejected")
            return
        was_waiting = not action.before
        st.allocation = action.after  # the ledger was charged when the plan was staged
        st.last_change_s = t
        track = self._track[st.job_id]
        if kind is ActionKind.PREEMPT:
            st.phase = Phase.PAUSED
            st.preemptions += 1
            self._waiting += 1
            self._set_rate(st, t, 0.0)
            return
        if was_waiting:
            self._waiting -= 1
        if st.first_start_s is None:
            st.first_start_s = t
        st.phase = Phase.RUNNING
        track.migrations += kind is ActionKind.MIGRATE
        track.resizes += kind is ActionKind.RESIZE
        delay = self._delay(action, track)
        if delay > 0:
            self._mechanism_gpu_s += delay * st.held_gpus
            self._set_rate(st, t, 0.0)
            self._push(t + delay, EventKind.ACTION_DONE, st.job_id, track.version)
        else:
            self._set_rate(st, t, self.perf.rate(st.spec, st.allocation))

    def _delay(self, action: Action, track: _Track) -> float:
        """Seconds without progress after ``action`` (one that gives the job GPUs)."""
        k, track.allocations = track.allocations, track.allocations + 1
        if self.measured_delays is not None:
            got = self.measured_delays.get(action.job_id, ())
            if k < len(got) and (d := got[k]) is not None:
                return d
        return self.costs.delay(action.kind) + self._stop_wait(action)

    def _stop_wait(self, action: Action) -> float:
        """``stop_s`` if ``action`` places its job on GPUs that were not free before this plan
        (nor its own): they are freed by a job the plan stopped, which must exit first."""
        free = self._free_before
        if free is None:
            return 0.0
        own = dict(action.before.workers)
        if any(n > free[node] + own.get(node, 0) for node, n in action.after.workers):
            return self.costs.stop_s
        return 0.0

    def _set_rate(self, st: JobStatus, t: float, rate: float) -> None:
        """Change a settled job's rate; schedule its completion if it now progresses."""
        track = self._track[st.job_id]
        track.version += 1
        st.rate = rate
        if rate > 0:
            left = max(0.0, st.spec.work - st.work_done)
            self._push(t + left / rate, EventKind.COMPLETION, st.job_id, track.version)

    # ------------------------------------------------------------------------------ progress
    @staticmethod
    def _settle(st: JobStatus, t: float) -> None:
        st.settle(t)

    def _finish(self, st: JobStatus, t: float, rejected: str = "") -> None:
        spec = st.spec
        track = self._track.pop(spec.job_id)
        del self._table[spec.job_id]
        if not st.allocation and st.phase is not Phase.RUNNING:
            self._waiting -= 1
        self._changed[spec.job_id] = None
        jct = t - spec.arrival_s
        sla_ideal = self._requested_ideal_s(spec)
        est_s, est_source = self._estimates.pop(spec.job_id, (math.nan, ""))
        if not rejected and math.isfinite(sla_ideal):
            self.knowledge.observe(spec, sla_ideal)  # what a finished job's run time teaches
        self._records.append(
            JobRecord(
                job_id=spec.job_id,
                arrival_s=spec.arrival_s,
                first_start_s=st.first_start_s,
                finish_s=t,
                work=spec.work,
                work_received=st.work_done,
                gpus=spec.requested_workers * spec.gpus_per_worker,
                attained_gpu_s=st.attained_gpu_s,
                preemptions=st.preemptions,
                migrations=track.migrations,
                resizes=track.resizes,
                utility=0.0 if rejected else float(spec.utility(jct)),
                rejected=rejected,
                ideal_s=self._ideal_s(spec),
                tier=spec.tier.value,
                sla_ideal_s=sla_ideal,
                est_s=est_s,
                est_source=est_source,
            )
        )

    def _ideal_s(self, spec: JobSpec) -> float:
        """Run time alone on an empty cluster at the job's best size (a lower bound on its JCT).

        Sizes from ``min_workers`` to ``max_workers`` (capped by the cluster), each packed on the
        fewest nodes; cached per shape of job, since the rate depends on the job only through it.
        """
        gpw = max(spec.gpus_per_worker, 1)
        top = min(spec.max_workers, self._total_gpus // gpw)
        key: tuple[object, ...] = (type(spec), spec.application, spec.batch_size, spec.requested_workers,
                                   spec.min_workers, top, spec.worker_demand)
        if self.cluster.typed:
            key = (*key, spec.gpu_types)
        best = self._ideal_rate.get(key) if type(spec) is JobSpec else None
        if best is None:
            per_node = max(self._node_gpus // gpw, 1)
            best = 0.0
            for n in range(spec.min_workers, max(top, spec.min_workers) + 1):
                if self.cluster.typed:
                    best = max(best, self._typed_rate(spec, n))
                    continue
                best = max(best, self.perf.rate(spec, packed(n, per_node)))
            self._ideal_rate[key] = best
        return spec.work / best if best > 0 else math.inf

    def _requested_ideal_s(self, spec: JobSpec) -> float:
        """Run time alone at the requested size packed on the fewest nodes (the SLA's ideal)."""
        rate = self._requested_rate(spec)
        return spec.work / rate if rate > 0 else math.inf

    def _requested_rate(self, spec: JobSpec) -> float:
        """Rate alone at the requested size packed on the fewest nodes (of its best type)."""
        if self.cluster.typed:
            return self._typed_rate(spec, spec.requested_workers)
        gpw = max(spec.gpus_per_worker, 1)
        per_node = max(self._node_gpus // gpw, 1)  # the largest node, found once (not per job)
        return self.perf.rate(spec, packed(spec.requested_workers, per_node))

    def _typed_rate(self, spec: JobSpec, workers: int) -> float:
        """The best rate alone of ``workers`` packed on one type the job allows."""
        best = 0.0
        for t in allowed_types(self.cluster, spec):
            alloc = packed_on(self.cluster, t, workers, spec.gpus_per_worker)
            if alloc:
                best = max(best, self.perf.rate(spec, alloc))
        return best

    # ------------------------------------------------------------------------------ capacity
    def _release(self, st: JobStatus) -> None:
        if st.allocation:
            self._ledger.give(st.spec, st.allocation)
            st.allocation = EMPTY

    # ------------------------------------------------------------------------------ failures
    def _node_event(self, node: int, t: float, down: bool) -> None:
        """A node fails (its jobs are preempted) or recovers; a reserved node stays down."""
        if down:
            self._failed.add(node)
            if node not in self._reserved.values():
                self._evict(node, t, "node failed", shrink=False)
                self._ledger.set_down(node, True)
        else:
            self._failed.discard(node)
            if node not in self._reserved.values():
                self._ledger.set_down(node, False)

    def _evict(self, node: int, t: float, reason: str, shrink: bool) -> None:
        """Take every job off ``node``: with ``shrink``, a job that can run on its workers on
        other nodes is resized onto them (its resize cost charged); the others are preempted."""
        for st in [s for s in self._table.values() if node in s.allocation.nodes
                   or any(n == node for n, _ in s.allocation.ps)]:
            self._settle(st, t)
            before = st.allocation
            rest = Allocation.of({n: k for n, k in before.workers if n != node})
            keep = shrink and rest and st.spec.can_run_on(rest.num_workers) and not before.ps
            self._release(st)
            if keep:
                self._ledger.take(st.spec, rest)
                self._apply_action(Action(ActionKind.RESIZE, st.job_id, before, rest, reason), t)
            else:
                self._apply_action(Action(ActionKind.PREEMPT, st.job_id, EMPTY, EMPTY, reason), t)
            self._changed[st.job_id] = None

    # --------------------------------------------------------------------------- reservation
    def _push_span(self) -> None:
        """Queue the next reservation slot's start while anything can still happen: a job is
        still to arrive, or one is active and some GPU was used since the last day's window
        opened (a job no policy will ever run does not keep the cycle going)."""
        assert self._spans is not None
        span = next(self._spans, None)
        if span is None:  # no node to reserve
            return
        if span.slot == 0:
            to_come = len(self._table) + len(self._records) < len(self._specs) + len(self.resume_from)
            self._spans_live = to_come or (bool(self._table) and self._busy_gpu_s > self._busy_at_window)
            self._busy_at_window = self._busy_gpu_s
        if self._spans_live:
            self._next_span = span
            self._push(span.take_s, EventKind.RESERVE, str(span.slot))

    def _reservation_event(self, slot: int, t: float, take: bool) -> None:
        """A slot takes the least busy node that is up (seeded tie-break) or gives its node back."""
        if take:
            span, self._next_span = self._next_span, None
            assert span is not None and self.reservation is not None
            held = set(self._reserved.values())
            up = [n for n in self._node_order if n not in self._failed and n not in held]
            if up:
                free = self._ledger.free_gpus
                node = min(up, key=lambda n: self._ledger.capacity[n][0] - free[n])  # first of the order on ties
                self._evict(node, t, "node reserved for inference", shrink=True)
                self._ledger.set_down(node, True)
                self._reserved[slot] = node
                self._push(span.give_s, EventKind.UNRESERVE, str(slot))
            self._push_span()
        else:
            node = self._reserved.pop(slot)
            if node not in self._failed:
                self._ledger.set_down(node, False)
        times, gpus = self._reserved_series
        times.append(t)
        gpus.append(sum(self._ledger.capacity[n][0] for n in self._reserved.values()))


