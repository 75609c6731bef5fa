"""The parity harness: one trace through the simulator and through the real ``Controller``.

The live side is the real controller on a real store (SQLite, or PostgreSQL) driving
``ClockedExecutor``, an executor that runs no processes: it advances each attempt at the
performance model's rate on a simulated clock, completes it when its work is done and
checkpoints it at once when asked to stop. The harness steps the controller at the instants the
simulator has events at (arrivals, completions, the policy's ticks), repeatedly until it is quiet,
and records every action either side carries out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stint.model.allocation import Allocation
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies.registry import make_with_options
from stint.reconcile import Action
from stint.runtime.controller import Controller, ControllerConfig
from stint.runtime.executor.base import JobExit, NodeInfo, Outcome, WorkerLaunch
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.view import LIVE_DEFAULT_WORK_S, worker_counts
from stint.sim.costs import CostModel
from stint.sim.engine import NodeFailure, Simulator

PERF = ScalingModel()
USER = "alice"


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One submission of the parity trace (the same fields live and simulated)."""

    arrival_s: float
    est_s: float
    gpus: int
    min_gpus: int
    max_gpus: int


Event = tuple[float, str, str, tuple[tuple[int, int], ...]]  # (time, kind, job, workers after)


def specs_of(trace: Sequence[TraceJob]) -> list[JobSpec]:
    """The trace as the simulator gets it: exactly the specs the live view builds."""
    from stint.model.resources import Resources
    from stint.model.utility import ConstantUtility

    return [JobSpec(str(i + 1), j.arrival_s, j.est_s or LIVE_DEFAULT_WORK_S, j.gpus, j.min_gpus,
                    j.max_gpus, Resources(gpu=1), application=f"j{i + 1}",
                    utility=ConstantUtility(1.0), user=USER, duration_s=j.est_s,
                    worker_counts=worker_counts(j.gpus, j.min_gpus, j.max_gpus, None))
            for i, j in enumerate(trace)]


def simulate(trace: Sequence[TraceJob], policy: str, options: Sequence[str],
             nodes: int, gpus: int, failures: Sequence[NodeFailure] = ()
             ) -> tuple[list[Event], list[str]]:
    """The trace through the simulator; (the actions, how each job ended, in job order)."""
    events: list[Event] = []

    def record(t: float, a: Action) -> None:
        events.append((round(t, 6), str(a.kind), a.job_id, a.after.workers))

    cluster = Cluster(tuple(_node_list(nodes, gpus)))
    res = Simulator(cluster, specs_of(trace), make_with_options(policy, options), PERF,
                    CostModel.free(), failures=failures, on_action=record).run()
    ended = {r.job_id: "rejected" if r.rejected else "succeeded" for r in res.records}
    return sorted(events), [ended[str(i + 1)] for i in range(len(trace))]


def _node_list(nodes: int, gpus: int) -> list[Any]:
    from stint.runtime.view import cluster_of

    return list(cluster_of([(f"node-{i}", gpus) for i in range(nodes)]).nodes)


@dataclass
class _Attempt:
    job_id: str
    attempt: int
    workers: Allocation
    started: float
    stop: Outcome | None = None


@dataclass
class ClockedExecutor:
    """An ``Executor`` on a simulated clock: attempts progress at ``PERF``'s rate."""

    node_slots: list[int]
    specs: Mapping[str, JobSpec]
    failures: Sequence[NodeFailure] = ()
    now: float = 0.0
    done: dict[str, float] = field(default_factory=dict)  # job -> work done by ended attempts
    live: dict[str, _Attempt] = field(default_factory=dict)
    ended: list[JobExit] = field(default_factory=list)

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(f"node-{i}", s) for i, s in enumerate(self.node_slots)]

    def launch(self, workers: Sequence[WorkerLaunch]) -> None:
        w = workers[0]
        counts: dict[int, int] = {}
        for x in workers:
            node = int(x.node.removeprefix("node-"))
            counts[node] = counts.get(node, 0) + 1
        if w.job_id not in self.live:
            self.live[w.job_id] = _Attempt(w.job_id, w.attempt, Allocation.of(counts), self.now)

    def request_stop(self, job_id: str, grace_s: float = 0.0) -> None:
        if job_id in self.live:
            self.live[job_id].stop = Outcome.CHECKPOINTED

    def kill(self, job_id: str) -> None:
        if job_id in self.live:
            self.live[job_id].stop = Outcome.STOPPED

    def down_nodes(self) -> frozenset[str]:
        return frozenset(f"node-{f.node}" for f in self.failures
                         if f.down_s <= self.now < f.up_s)

    def _rate(self, a: _Attempt) -> float:
        return PERF.rate(self.specs[a.job_id], a.workers)

    def finish_time(self, a: _Attempt) -> float:
        left = self.specs[a.job_id].work - self.done.get(a.job_id, 0.0)
        rate = self._rate(a)
        return a.started + left / rate if rate > 0 else math.inf

    def next_event(self) -> float:
        times = [self.now if a.stop else self.finish_time(a) for a in self.live.values()]
        times += [t for f in self.failures for t in (f.down_s, f.up_s) if t > self.now]
        return min(times, default=math.inf)

    def poll(self) -> list[JobExit]:
        out = []
        down = {int(n.removeprefix("node-")) for n in self.down_nodes()}
        for a in self.live.values():  # a node that fails stops its attempts (no checkpoint)
            if a.stop is None and down & set(a.workers.nodes):
                a.stop = Outcome.STOPPED
        for jid, a in list(self.live.items()):
            finish = self.finish_time(a)
            if a.stop is None and finish > self.now + 1e-9:
                continue
            self.done[jid] = self.done.get(jid, 0.0) + self._rate(a) * (min(finish, self.now) - a.started)
            outcome = Outcome.SUCCEEDED if a.stop is None else a.stop
            code = {Outcome.SUCCEEDED: 0, Outcome.CHECKPOINTED: 75}.get(outcome, -9)
            out.append(JobExit(jid, a.attempt, outcome,
                               {r: code for r in range(a.workers.num_workers)}, str(outcome), self.now))
            del self.live[jid]
        self.ended += out
        return out

    def running(self) -> dict[str, int]:
        return {j: a.attempt for j, a in self.live.items()}

    def exit_of(self, job_id: str, attempt: int) -> JobExit | None:
        return next((e for e in self.ended if e.job_id == job_id and e.attempt == attempt), None)

    def status(self, job_id: str) -> Mapping[str, Any] | None:
        return None

    def close(self) -> None:
        pass


def run_live(trace: Sequence[TraceJob], policy: str, options: Sequence[str], nodes: int,
             gpus: int, store: Store, jobs_dir: Path, failures: Sequence[NodeFailure] = ()
             ) -> tuple[list[Event], list[str]]:
    """The trace through the real controller; (the actions, the states the jobs ended in)."""
    store.epoch(0.0)  # the store's clock starts at the trace's 0, as the simulator's does
    specs = {s.job_id: s for s in specs_of(trace)}
    ex = ClockedExecutor([gpus] * nodes, specs, failures)
    ctl = Controller(store, ex, make_with_options(policy, options), ControllerConfig(jobs_dir))
    alice = _user(store)
    pending = sorted(enumerate(trace), key=lambda p: p[1].arrival_s)
    events: list[Event] = []
    tick = ctl.policy.tick_s
    t = 0.0
    for _ in range(100_000):
        nxt = min(pending[0][1].arrival_s if pending else math.inf, ex.next_event(),
                  _next_tick(ctl, t, tick) if _active(store) else math.inf)
        if nxt == math.inf:
            break
        t = ex.now = nxt
        while pending and pending[0][1].arrival_s <= t:
            i, j = pending.pop(0)
            store.add_job(NewJob(f"j{i + 1}", ["true"], j.gpus, j.min_gpus, j.max_gpus,
                                 "standard", 1.0, None, est_s=j.est_s), alice, t)
        for _ in range(20):  # step at this instant until nothing more happens
            report = ctl.step(t)
            events += [(round(t, 6), str(a.kind), a.job_id, a.after.workers) for a in report.actions]
            if report.skipped:
                break
    states = [j.state for j in store.list_jobs(alice)]
    return sorted(events), states


def _next_tick(ctl: Controller, t: float, tick: float | None) -> float:
    due = ctl.policy.next_due()
    if not tick or due is None:
        return math.inf
    return max((math.floor(t / tick + 1e-9) + 1) * tick, math.ceil(due / tick - 1e-9) * tick)


def _active(store: Store) -> bool:
    from stint.runtime.states import TERMINAL

    with store.read() as r:
        from sqlalchemy import func, select

        from stint.runtime.tables import Job

        return bool(r.scalar(select(func.count()).select_from(Job).where(
            Job.state.not_in([str(s) for s in TERMINAL]))))


def _user(store: Store) -> Caller:
    store.create_token(USER, 0.0)
    with store.read() as r:
        from sqlalchemy import select

        from stint.runtime.tables import User

        uid = r.scalar(select(User.id).where(User.name == USER))
    assert uid is not None
    return Caller(uid, USER, False)
