"""The parity harness: one trace through the simulator and through the real ``Controller``.

The live side is the real controller on a real store (SQLite, or PostgreSQL) driving
``ClockedExecutor``, an executor that runs no processes: it advances each attempt at the
performance model's rate on a simulated clock, completes it when its work is done and
checkpoints it at once when asked to stop. The harness steps the controller at the instants the
simulator has events at (arrivals, completions, the policy's ticks), repeatedly until it is quiet,
and records every action either side carries out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies.registry import make_with_options
from stint.reconcile import Action
from stint.runtime.controller import Controller, ControllerConfig, StepReport
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.replay import replay
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
    """The trace as the simulator gets it: the specs the live view builds, with the declared
    length also as ``est_s`` (what the simulator's declared knowledge reads; the live view's
    ``work`` is that declaration, which its statuses' ``known_work`` falls back to)."""
    from stint.model.resources import Resources
    from stint.model.utility import ConstantUtility

    return [JobSpec(str(i + 1), j.arrival_s, j.est_s or LIVE_DEFAULT_WORK_S, j.gpus, j.min_gpus,
                    j.max_gpus, Resources(gpu=1), application=f"j{i + 1}",
                    utility=ConstantUtility(1.0), user=USER, duration_s=j.est_s, est_s=j.est_s,
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


def run_live(trace: Sequence[TraceJob], policy: str, options: Sequence[str], nodes: int,
             gpus: int, store: Store, jobs_dir: Path, failures: Sequence[NodeFailure] = ()
             ) -> tuple[list[Event], list[str]]:
    """The trace through the real controller; (the actions, the states the jobs ended in)."""
    store.epoch(0.0)  # the store's clock starts at the trace's 0, as the simulator's does
    specs = {s.job_id: s for s in specs_of(trace)}
    ex = ClockedExecutor([gpus] * nodes, specs, PERF, failures)
    # Forecasts at every step that changed something: they write estimated starts, which must
    # change no decision (they are not news to the policy).
    ctl = Controller(store, ex, make_with_options(policy, options), ControllerConfig(
        jobs_dir, forecast_policy=lambda: make_with_options(policy, options), forecast_s=0.0))
    alice = _user(store)
    events: list[Event] = []

    def record(t: float, report: StepReport) -> None:
        events.extend((round(t, 6), str(a.kind), a.job_id, a.after.workers)
                      for a in report.actions)

    replay(ctl, ex, alice, [(j.arrival_s, NewJob(f"j{i + 1}", ["true"], j.gpus, j.min_gpus,
                                                 j.max_gpus, "standard", 1.0, None, est_s=j.est_s))
                            for i, j in enumerate(trace)], record)
    states = [j.state for j in store.list_jobs(alice)]
    return sorted(events), states


def _user(store: Store) -> Caller:
    store.create_token(USER, 0.0)
    with store.read() as r:
        from sqlalchemy import select

        from stint.runtime.tables import User

        uid = r.scalar(select(User.id).where(User.name == USER))
    assert uid is not None
    return Caller(uid, USER, False)
