"""The fleet simulation: one ``Simulator`` per cluster, stepped on one clock, and a global
scheduler that places arriving jobs on clusters and moves waiting ones (docs/fleet.md).

Each cluster is a ``_Member``: the engine's ``Simulator`` with its loop body callable one event
time at a time (``step``), jobs handed in as they reach it and taken out (``withdraw``) when the
global scheduler moves them or their cluster fails. At each fleet event time, in order:
failures and recoveries; arrivals from the trace; the global scheduler (when jobs are pending,
or on its period, or after a failure); jobs whose copy has finished enter their cluster; then
every cluster with something at that time takes its step, exactly as ``Simulator.run`` would.
A one-cluster fleet therefore produces the very records of ``stint sim``.

A job moved or resumed elsewhere enters its new cluster when its copies are done (``copy_s``:
checkpoint, data set) with its history, as the live fleet's job is one store row wherever it
runs: its spec as submitted (the original arrival: queue age, SLA deadline, response ratio),
work done (as of its checkpoint after a failure), attained GPU-seconds, first start and
preemptions (``Simulator.step``'s ``returning``). A job that has run is resumed there, so its
restart is that cluster's resume cost (``CostModel.resume_s``; the global scheduler counts it as
``checkpoint.restart_s`` in ``move_cost_s``). A cluster that fails (or every cluster of
a region) loses its jobs' work since their last checkpoint: a running job checkpoints every
``checkpoint.interval_s`` of running since its last (re)start, so it loses
``rate x ((t - last start) mod interval)``; checkpoints are assumed replicated off the cluster,
so the job resumes elsewhere, copying over the link from the failed cluster. A node failure is
the engine's own (its jobs are preempted and resume in the same cluster, no work lost).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from stint.model.fleet import Fleet, FleetJob
from stint.model.job import JobSpec, Tier
from stint.perf.model import PerfModel
from stint.policies.base import JobStatus, Phase, Policy
from stint.policies.fleet.base import (
    ClusterState,
    FleetView,
    GlobalPolicy,
    Pending,
    Waiting,
    copy_s,
)
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator
from stint.sim.events import EventKind
from stint.sim.metrics import RunResult


class _Member(Simulator):
    """One cluster of the fleet: the engine, one event time per ``step`` (``Simulator.step``)."""

    def begin(self, start: float) -> None:
        self._last_t = start
        self.events = 0

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def withdraw(self, job_id: str, t: float) -> JobStatus:
        """Take an active job out (no record); the policy re-plans at ``t``."""
        self._advance(t)
        st = self._table.pop(job_id)
        self._track.pop(job_id)
        st.settle(t)
        if not st.allocation and st.phase is not Phase.RUNNING:
            self._waiting -= 1
        self._release(st)
        self._changed[job_id] = None
        self._push(t, EventKind.TICK, "")
        return st

    def set_all_down(self, down: bool, t: float) -> None:
        self._advance(t)
        for i in range(self.cluster.num_nodes):
            self._ledger.set_down(i, down)
        self._push(t, EventKind.TICK, "")

    def active(self) -> list[JobStatus]:
        return list(self._table.values())

    def waiting(self) -> list[JobStatus]:
        """The active jobs that hold no GPUs (``workers`` read directly: this runs over every
        active job of every cluster at each global call; none read where the engine counts no
        job waiting)."""
        if not self._waiting:
            return []
        return [st for st in self._table.values() if not st.allocation.workers]

    def close(self, start: float, wall_s: float, cpu_s: float) -> RunResult:
        for st in list(self._table.values()):
            self._finish(st, self._last_t, rejected="never scheduled")
        return RunResult(self.policy.name, self._records, self.cluster.total_gpus, self._busy_gpu_s, start,
                         self._last_t, self._series, self._latency, self.events, wall_s, cpu_s, self._refusals)

    @property
    def used_gpus(self) -> int:
        return self._ledger.used_gpus

    @property
    def busy_gpu_s(self) -> float:
        return self._busy_gpu_s

    def busy_at(self, t: float) -> float:
        """GPU-seconds used up to ``t`` (not before its last event)."""
        return self._busy_gpu_s + self._ledger.used_gpus * max(0.0, t - self._last_t)


@dataclass(slots=True)
class _Job:
    """The fleet's bookkeeping for one job across its clusters."""

    job: FleetJob
    at: int | None = None  # the cluster it is in (or in transit to / its checkpoint is in)
    past: JobStatus | None = None  # its history when it left its last cluster (``_history``)
    has_ckpt: bool = False
    cluster_moves: int = 0
    region_moves: int = 0
    ckpt_gb: float = 0.0
    data_gb: float = 0.0
    lost_work: float = 0.0
    max_lost_s: float = 0.0  # the longest stretch of running lost to one failure


@dataclass(frozen=True, slots=True)
class FleetRecord:
    job_id: str
    tier: str
    cluster: str
    arrival_s: float
    finish_s: float
    gpus: int
    ideal_s: float
    rejected: str
    cluster_moves: int
    region_moves: int
    ckpt_gb_moved: float
    data_gb_moved: float
    lost_gpu_s: float
    max_lost_s: float
    warmup: bool  # running when the window opened (``FleetJob.warmup``): not in the tiers' figures

    @property
    def attainment(self) -> float:
        """Ideal run time over JCT (1 = as fast as alone on an empty cluster); 0 if rejected."""
        jct = self.finish_s - self.arrival_s
        if self.rejected:
            return 0.0
        return min(1.0, self.ideal_s / jct) if jct > 0 else 1.0


FLEET_CSV_FIELDS = [*FleetRecord.__slots__, "attainment"]


@dataclass
class FleetResult:
    scheduler: str
    policy: str
    fleet: Fleet
    records: list[FleetRecord]
    clusters: list[RunResult]
    start_s: float
    window: tuple[float, list[float]]  # the last arrival and each cluster's GPU-s used by then
    global_calls: int
    wall_s: float
    cpu_s: float

    def summary(self) -> dict[str, Any]:
        recs = [r for r in self.records if not r.warmup]
        done = [r for r in recs if not r.rejected]
        end = max((r.finish_s for r in self.records if not r.rejected), default=self.start_s)
        span = max(end - self.start_s, 0.0)
        busy = sum(c.busy_gpu_s for c in self.clusters)
        last, used = self.window
        wspan = max(last - self.start_s, 0.0)
        down = self.fleet.down_gpu_s(self.start_s, last)
        up = [fc.gpus * wspan - d for fc, d in zip(self.fleet.clusters, down, strict=True)]
        tiers: dict[str, Any] = {}
        for tier in Tier:
            att = np.array([r.attainment for r in recs if r.tier == tier.value]) if recs else np.zeros(0)
            tiers[tier.value] = {"jobs": len(att), "attainment_mean": float(att.mean()) if len(att) else 0.0,
                                 "attainment_p10": float(np.percentile(att, 10)) if len(att) else 0.0}
        jct = np.array([r.finish_s - r.arrival_s for r in done]) if done else np.zeros(1)
        return {
            "scheduler": self.scheduler,
            "policy": self.policy,
            "clusters": len(self.fleet.clusters),
            "gpus": self.fleet.total_gpus,
            "jobs": len(recs),
            "warmup_jobs": len(self.records) - len(recs),
            "completed": len(done),
            "rejected": len(recs) - len(done),
            # over the arrival window (first to last arrival), per GPU-second up in it
            "gpu_utilization": sum(used) / sum(up) if sum(up) > 0 else 0.0,
            "gpu_utilization_installed": sum(used) / (self.fleet.total_gpus * wspan) if wspan > 0 else 0.0,
            "gpu_utilization_makespan": busy / (self.fleet.total_gpus * span) if span > 0 else 0.0,
            "makespan_s": span,
            "avg_jct_s": float(jct.mean()),
            "tiers": tiers,
            "cluster_moves": sum(r.cluster_moves for r in recs),
            "region_moves": sum(r.region_moves for r in recs),
            "ckpt_gb_moved": sum(r.ckpt_gb_moved for r in recs),
            "data_gb_moved": sum(r.data_gb_moved for r in recs),
            "work_lost_gpu_s": sum(r.lost_gpu_s for r in recs),
            "jobs_losing_work": sum(r.lost_gpu_s > 0 for r in recs),
            "max_lost_s_per_failure": max((r.max_lost_s for r in recs), default=0.0),
            "checkpoint_interval_s": self.fleet.checkpoint.interval_s,
            "global_calls": self.global_calls,
            "events": sum(c.events for c in self.clusters),
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "per_cluster": {
                fc.name: {"region": fc.region, "gpus": fc.gpus,
                          "utilization": u / g if g > 0 else 0.0,
                          "completed": sum(r.completed for r in c.records)}
                for fc, c, u, g in zip(self.fleet.clusters, self.clusters, used or [0.0] * len(self.clusters), up,
                                       strict=True)
            },
        }


@dataclass
class FleetSimulator:
    """Replays ``jobs`` on ``fleet``: ``scheduler`` decides clusters, ``make_policy()`` builds each
    cluster's policy. ``run()`` returns the fleet's figures."""

    fleet: Fleet
    jobs: Sequence[FleetJob]
    scheduler: GlobalPolicy
    make_policy: Callable[[], Policy]
    perf: PerfModel
    costs: CostModel = field(default_factory=CostModel)
    decision_period_s: float | None = None
    on_progress: Callable[[int, int], None] | None = None

    def __post_init__(self) -> None:
        self._jobs = sorted(self.jobs, key=lambda j: j.spec.arrival_s)
        self._members = [_Member(fc.cluster(), (), self.make_policy(), self.perf, self.costs,
                                 decision_period_s=self.decision_period_s) for fc in self.fleet.clusters]
        self._state: dict[str, _Job] = {}
        self._records: list[FleetRecord] = []
        self._seen = [0] * len(self._members)  # member records already turned into fleet records
        self._assigned = [0] * len(self._members)
        self._backlog = [0.0] * len(self._members)
        self._down = [False] * len(self._members)
        self._sizes = [fc.gpus for fc in self.fleet.clusters]
        self._dirty: set[int] = set(range(len(self._members)))  # clusters whose state changed
        self._states: list[ClusterState] = [ClusterState(i, 0, 0, 0, 0.0, False) for i in range(len(self._members))]
        self._cut = [False] * len(self._members)
        self._wake: list[tuple[float, int]] = []  # (time, member) : a member may have an event then
        self._transit: list[tuple[float, int, int, str]] = []  # (time, seq, member, job)
        self._seq = 0
        self._pending: list[Pending] = []
        self._has_new = False  # a job became pending since the last global call
        self._window: tuple[float, list[float]] = (0.0, [])  # last arrival, GPU-s used by then
        self._calls = 0

    # ----------------------------------------------------------------------------------- run
    def run(self) -> FleetResult:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        jobs, n, ai = self._jobs, len(self._jobs), 0
        start = jobs[0].spec.arrival_s if jobs else 0.0
        for m in self._members:
            m.begin(start)
        fails = self._failure_events()
        period = self.scheduler.period_s
        next_period = (math.floor(start / period) + 1) * period if period else math.inf
        while ai < n or self._wake or self._transit or (fails and self._state):
            t = min(jobs[ai].spec.arrival_s if ai < n else math.inf, self._wake[0][0] if self._wake else math.inf,
                    self._transit[0][0] if self._transit else math.inf, fails[0][0] if fails else math.inf)
            if next_period < t and (self._wake or self._transit or ai < n):  # while anything can change
                t = next_period
            if t == math.inf:
                break
            failed = False
            while fails and fails[0][0] == t:
                _, _, kind, down, k = heapq.heappop(fails)
                self._failure(kind, down, k, t)
                failed = True
            while ai < n and jobs[ai].spec.arrival_s == t:
                self._admit(jobs[ai])
                ai += 1
                if ai == n:
                    self._window = (t, [m.busy_at(t) for m in self._members])
            due = t >= next_period
            if due and period:
                next_period = (math.floor(t / period) + 1) * period
            if due or (self._pending and (failed or self._has_new)):
                self._global(t, with_waiting=due)
            self._step_all(t)
            if self.on_progress is not None and ai % 4096 == 0:
                self.on_progress(len(self._records), n)
        results = [m.close(start, 0.0, 0.0) for m in self._members]
        self._collect_all(force=True)
        return FleetResult(self.scheduler.name, self._members[0].policy.name if self._members else "",
                           self.fleet, self._records, results, start, self._window, self._calls,
                           time.perf_counter() - wall0, time.process_time() - cpu0)

    def _admit(self, job: FleetJob) -> None:
        self._state[job.job_id] = _Job(job)
        self._pending.append(Pending(job, None, False))
        self._has_new = True

    # -------------------------------------------------------------------------------- global
    def _global(self, t: float, with_waiting: bool) -> None:
        self._has_new = False
        waiting: list[Waiting] = []
        if with_waiting:
            for i, m in enumerate(self._members):
                for st in m.waiting():
                    js = self._state[st.job_id]
                    waiting.append(Waiting(js.job, i, st.last_change_s, js.has_ckpt or st.work_done > 0))
        states = self._snapshot()
        pending, self._pending = self._pending, []
        view = FleetView(t, self.fleet, states, pending, waiting)
        plan = self.scheduler.plan(view)
        self._calls += 1
        for p in pending:
            dst = plan.place.get(p.job.job_id)
            if dst is None or not states[dst].available:
                self._pending.append(p)  # held: offered again at the next call
            else:
                self._send(p.job.job_id, dst, t)
        shown = {w.job.job_id for w in waiting}
        for job_id, dst in plan.move.items():
            if job_id not in shown:
                raise KeyError(f"global scheduler {self.scheduler.name!r} moved {job_id!r}, "
                               "not a waiting job it was shown")
            js = self._state[job_id]
            if js.at is None or dst == js.at or not states[dst].available or not states[js.at].available:
                continue
            st = self._withdraw(js.at, job_id, t)
            self._unassign(js)
            js.past = _history(st)
            js.has_ckpt = js.has_ckpt or st.work_done > 0
            self._send(job_id, dst, t)

    def _snapshot(self) -> tuple[ClusterState, ...]:
        """The clusters' states, rebuilt only for those that changed since the last call."""
        states = self._states
        for i in self._dirty:
            states[i] = ClusterState(i, 0 if self._down[i] else self._sizes[i], self._members[i].used_gpus,
                                     self._assigned[i], self._backlog[i], not (self._down[i] or self._cut[i]))
        self._dirty.clear()
        return tuple(states)

    def _send(self, job_id: str, dst: int, t: float) -> None:
        """Start the job's copy to ``dst``; it enters there when the copy is done."""
        js = self._state[job_id]
        job, src = js.job, js.at
        delay = copy_s(self.fleet, job, src, dst, js.has_ckpt)
        if src is not None and src != dst:
            js.ckpt_gb += job.ckpt_gb if js.has_ckpt else 0.0
            same = self.fleet.clusters[src].region == self.fleet.clusters[dst].region
            js.cluster_moves += same
            js.region_moves += not same
        if dst != job.data_cluster:
            js.data_gb += job.data_gb
        js.at = dst
        self._dirty.add(dst)
        self._assigned[dst] += job.gpus
        self._backlog[dst] += job.gpus * job.est_s
        self._seq += 1
        heapq.heappush(self._transit, (t + delay, self._seq, dst, job_id))

    def _withdraw(self, i: int, job_id: str, t: float) -> JobStatus:
        heapq.heappush(self._wake, (t, i))
        return self._members[i].withdraw(job_id, t)

    def _unassign(self, js: _Job) -> None:
        assert js.at is not None
        self._dirty.add(js.at)
        self._assigned[js.at] -= js.job.gpus
        self._backlog[js.at] -= js.job.gpus * js.job.est_s

    # --------------------------------------------------------------------------------- steps
    def _step_all(self, t: float) -> None:
        arrivals: dict[int, list[JobSpec]] = {}  # first entries (no history yet)
        returning: dict[int, list[JobStatus]] = {}  # jobs that were in a cluster before
        while self._transit and self._transit[0][0] <= t:
            again = False
            while self._transit and self._transit[0][0] <= t:
                _, _, dst, job_id = heapq.heappop(self._transit)
                js = self._state[job_id]
                if self._down[dst] or self._cut[dst]:  # it failed while the job was on its way
                    self._unassign(js)
                    self._pending.append(Pending(js.job, dst, js.has_ckpt))
                    again = True
                    continue
                if js.past is None:
                    arrivals.setdefault(dst, []).append(js.job.spec)
                else:
                    returning.setdefault(dst, []).append(replace(js.past, last_change_s=t))
            if again:
                self._global(t, with_waiting=False)
        due = set(arrivals) | set(returning)
        while self._wake and self._wake[0][0] <= t:
            due.add(heapq.heappop(self._wake)[1])
        for i in sorted(due):
            m = self._members[i]
            if m.next_time() == t or i in arrivals or i in returning:
                m.step(t, arrivals.get(i, ()), returning.get(i, ()))
                self._dirty.add(i)
                self._collect(i)
            nxt = m.next_time()
            if nxt < math.inf:
                heapq.heappush(self._wake, (nxt, i))

    def _collect(self, i: int) -> None:
        """Turn the records cluster ``i`` wrote since last time into fleet records."""
        m = self._members[i]
        recs = m._records
        while self._seen[i] < len(recs):
            r = recs[self._seen[i]]
            self._seen[i] += 1
            js = self._state.pop(r.job_id)
            self._unassign(js)
            spec = js.job.spec
            self._records.append(FleetRecord(
                spec.job_id, spec.tier.value, self.fleet.clusters[i].name, spec.arrival_s, r.finish_s, js.job.gpus,
                r.ideal_s, r.rejected, js.cluster_moves, js.region_moves, js.ckpt_gb, js.data_gb,
                js.lost_work * js.job.gpus, js.max_lost_s, js.job.warmup))

    def _collect_all(self, force: bool = False) -> None:
        for i in range(len(self._members)):
            self._collect(i)
        if force:
            for js in self._state.values():  # held until the end: never placed
                spec = js.job.spec
                self._records.append(FleetRecord(
                    spec.job_id, spec.tier.value, "", spec.arrival_s, spec.arrival_s, js.job.gpus, math.inf,
                    "never placed", js.cluster_moves, js.region_moves, js.ckpt_gb, js.data_gb,
                    js.lost_work * js.job.gpus, js.max_lost_s, js.job.warmup))

    # ------------------------------------------------------------------------------ failures
    def _failure_events(self) -> list[tuple[float, int, str, bool, int]]:
        """(time, seq, kind, down, failure index) for every failure; node failures go to the
        member's own heap, as ``Simulator`` takes them."""
        out: list[tuple[float, int, str, bool, int]] = []
        for k, f in enumerate(self.fleet.failures):
            if f.kind == "node":
                name, _, idx = f.target.partition("/")
                i = self.fleet.index(name)
                m = self._members[i]
                m._push(f.down_s, EventKind.NODE_DOWN, idx)
                m._push(f.up_s, EventKind.NODE_UP, idx)
                heapq.heappush(self._wake, (m.next_time(), i))
                continue
            out += [(f.down_s, 2 * k, f.kind, True, k), (f.up_s, 2 * k + 1, f.kind, False, k)]
        heapq.heapify(out)
        return out

    def _failure(self, kind: str, down: bool, k: int, t: float) -> None:
        for i in self.fleet.clusters_hit(self.fleet.failures[k]):
            self._dirty.add(i)
            if kind == "network":
                self._cut[i] = down
                continue
            if down:
                self._evacuate(i, t)
            self._down[i] = down
            self._members[i].set_all_down(down, t)
            heapq.heappush(self._wake, (t, i))

    def _evacuate(self, i: int, t: float) -> None:
        """Every job of cluster ``i`` rolls back to its last checkpoint and waits to be placed."""
        m, interval = self._members[i], self.fleet.checkpoint.interval_s
        for st in m.active():
            running, rate, since = bool(st.allocation), st.rate, st.last_change_s
            self._withdraw(i, st.job_id, t)
            js = self._state[st.job_id]
            self._unassign(js)
            lost = 0.0
            if running and rate > 0:
                lost = min(st.work_done, rate * ((t - since) % interval))
                js.max_lost_s = max(js.max_lost_s, lost / rate)
            js.lost_work += lost
            js.past = _history(st, lost)
            js.has_ckpt = js.has_ckpt or st.work_done - lost > 0
            self._pending.append(Pending(js.job, i, js.has_ckpt))


def _history(st: JobStatus, lost: float = 0.0) -> JobStatus:
    """What a job withdrawn from its cluster (``st``, settled) takes to the next: its spec, work
    done less ``lost`` (rolled back to its checkpoint), attained GPU-seconds (the service it
    received, lost work included, as the live store counts it), first start, preemptions."""
    return JobStatus(spec=st.spec, work_done=st.work_done - lost, attained_gpu_s=st.attained_gpu_s,
                     first_start_s=st.first_start_s, preemptions=st.preemptions)
