"""The parity harness: one trace through the simulator and through the real ``Controller``.

The live side is the real controller on a real store (SQLite, or PostgreSQL) driving
``ClockedExecutor``, an executor that runs no processes: it advances each attempt at the
performance model's rate on a simulated clock, completes it when its work is done and
checkpoints it at once when asked to stop; a parameter-server job's PS tasks hold no slot (they
count on their nodes' cores and memory). The harness steps the controller at the instants the
simulator has events at (arrivals, completions, the policy's ticks), repeatedly until it is quiet,
and records every action either side carries out, with its workers' and its PSs' placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from stint.model.allocation import Allocation
from stint.model.job import JobSpec
from stint.model.resources import Resources
from stint.model.utility import ConstantUtility
from stint.perf.scaling import ScalingModel
from stint.policies.registry import make_with_options
from stint.reconcile import Action
from stint.runtime.controller import Controller, ControllerConfig, StepReport
from stint.runtime.executor.base import NodeInfo
from stint.runtime.executor.clocked import ClockedExecutor
from stint.runtime.replay import replay
from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.view import LIVE_DEFAULT_WORK_S, live_cluster, worker_counts
from stint.sim.costs import CostModel
from stint.sim.engine import NodeFailure, Simulator

PERF = ScalingModel()
USER = "alice"
# A node of the PS group (role "ps", no GPUs): room for two parameter servers of one core and 1 GiB.
PS_NODE_CPUS, PS_NODE_MEM_GB = 2.0, 4.0


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One submission of the parity trace (the same fields live and simulated)."""

    arrival_s: float
    est_s: float
    gpus: int
    min_gpus: int
    max_gpus: int
    ps: int = 0  # parameter servers at ``gpus`` workers (0: an all-reduce job)
    min_ps: int = 0  # the PS counts' bounds (0: ``ps``)
    max_ps: int = 0
    ps_cpus: float = 1.0  # one PS's cores and memory (GiB)
    ps_mem_gb: float = 1.0


Pairs = tuple[tuple[int, int], ...]
Event = tuple[float, str, str, Pairs, Pairs]  # (time, kind, job, workers after, PSs after)


def parity_nodes(nodes: int, gpus: int, ps_nodes: int = 0) -> list[NodeInfo]:
    """The parity cluster: ``nodes`` of ``gpus`` GPUs, then ``ps_nodes`` of the PS group (with
    one, the GPU nodes are of role "worker", as a cluster file's groups would say)."""
    role = "worker" if ps_nodes else "any"
    return ([NodeInfo(f"node-{i}", gpus, role=role) for i in range(nodes)]
            + [NodeInfo(f"node-{nodes + i}", 0, role="ps", cpus=PS_NODE_CPUS, mem_gb=PS_NODE_MEM_GB)
               for i in range(ps_nodes)])


def specs_of(trace: Sequence[TraceJob]) -> list[JobSpec]:
    """The trace as the simulator gets it: the specs the live view builds, with the declared
    length also as ``est_s`` (what the simulator's declared knowledge reads; the live view's
    ``work`` is that declaration, which its statuses' ``known_work`` falls back to). Written out
    here, not read through ``view.spec_of``, so that a change there shows as a difference: a PS
    job's workers are one GPU and 1 Gbit/s each, its PSs ``ps_cpus`` cores, ``ps_mem_gb`` GiB and
    ``gpus / ps`` Gbit/s each (so ``ceil(y b/B)`` is ``ps`` at ``gpus``). Job ``i + 1`` is the
    trace's ``i``-th: the store numbers jobs in submission order, so the trace is in arrival order."""
    assert list(trace) == sorted(trace, key=lambda j: j.arrival_s), "the trace must be in arrival order"
    return [JobSpec(str(i + 1), j.arrival_s, j.est_s or LIVE_DEFAULT_WORK_S, j.gpus, j.min_gpus,
                    j.max_gpus, Resources(gpu=1, net_gbps=1.0) if j.ps else Resources(gpu=1),
                    Resources(cpu=j.ps_cpus, mem_gb=j.ps_mem_gb, net_gbps=j.gpus / j.ps) if j.ps else None,
                    application=f"j{i + 1}", utility=ConstantUtility(1.0), user=USER,
                    duration_s=j.est_s, est_s=j.est_s,
                    worker_counts=worker_counts(j.gpus, j.min_gpus, j.max_gpus, None),
                    min_ps=j.min_ps or j.ps, max_ps=j.max_ps or j.ps)
            for i, j in enumerate(trace)]


def _event(t: float, a: Action) -> Event:
    return (round(t, 6), str(a.kind), a.job_id, a.after.workers, a.after.ps)


def simulate(trace: Sequence[TraceJob], policy: str, options: Sequence[str],
             nodes: int, gpus: int, failures: Sequence[NodeFailure] = (), ps_nodes: int = 0
             ) -> tuple[list[Event], list[str]]:
    """The trace through the simulator on the cluster the controller sees (``live_cluster`` of
    the parity nodes); (the actions, how each job ended, in job order)."""
    events: list[Event] = []

    def record(t: float, a: Action) -> None:
        events.append(_event(t, a))

    cluster = live_cluster(parity_nodes(nodes, gpus, ps_nodes))
    res = Simulator(cluster, specs_of(trace), make_with_options(policy, options), PERF,
                    CostModel.free(), failures=failures, on_action=record).run()
    ended = {r.job_id: "rejected" if r.rejected else "succeeded" for r in res.records}
    return sorted(events), [ended[str(i + 1)] for i in range(len(trace))]


def run_live(trace: Sequence[TraceJob], policy: str, options: Sequence[str], nodes: int,
             gpus: int, store: Store, jobs_dir: Path, failures: Sequence[NodeFailure] = (),
             ps_nodes: int = 0) -> tuple[list[Event], list[str]]:
    """The trace through the real controller; (the actions, the states the jobs ended in).
    The tasks the controller launched must be where its actions put them: each job's attempts'
    workers and PSs are, in order, the allocations its actions gave it."""
    store.epoch(0.0)  # the store's clock starts at the trace's 0, as the simulator's does
    specs = {s.job_id: s for s in specs_of(trace)}
    infos = parity_nodes(nodes, gpus, ps_nodes)
    ex = ClockedExecutor([n.slots for n in infos], specs, PERF, failures, node_infos=infos)
    # Forecasts at every step that changed something: they write estimated starts, which must
    # change no decision (they are not news to the policy).
    ctl = Controller(store, ex, make_with_options(policy, options), ControllerConfig(
        jobs_dir, forecast_policy=lambda: make_with_options(policy, options), forecast_s=0.0))
    alice = _user(store)
    events: list[Event] = []

    def record(t: float, report: StepReport) -> None:
        events.extend(_event(t, a) for a in report.actions)

    replay(ctl, ex, alice, [(j.arrival_s, _submission(i, j)) for i, j in enumerate(trace)], record)
    states = [j.state for j in store.list_jobs(alice)]
    enacted = [(job, Allocation(w, p)) for _, _, job, w, p in events if w]
    launched = sorted(ex.launched, key=lambda x: int(x[0]))  # (stable: each job's in order)
    assert launched == sorted(enacted, key=lambda x: int(x[0])), "tasks launched elsewhere than enacted"
    return sorted(events), states


def _submission(i: int, j: TraceJob) -> NewJob:
    job = NewJob(f"j{i + 1}", ["true"], j.gpus, j.min_gpus, j.max_gpus, "standard", 1.0, None,
                 est_s=j.est_s)
    if not j.ps:
        return job
    return replace(job, ps_count=j.ps, min_ps=j.min_ps or None, max_ps=j.max_ps or None,
                   ps_cpus=j.ps_cpus, ps_mem_gb=j.ps_mem_gb)


def _user(store: Store) -> Caller:
    store.create_token(USER, 0.0)
    with store.read() as r:
        from sqlalchemy import select

        from stint.runtime.tables import User

        uid = r.scalar(select(User.id).where(User.name == USER))
    assert uid is not None
    return Caller(uid, USER, False)
