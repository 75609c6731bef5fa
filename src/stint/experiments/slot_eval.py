"""A slot-based evaluator for the paper's setting: any registered policy, T slots, PS jobs.

Each slot t: add the jobs arriving in t, call ``policy.plan`` (timed), stage its plan on the
capacity ledger with the same step the simulator and the live controller use
(``stint.reconcile.stage``; a refused action is a ``ScheduleViolation`` here, since the paper's
policies must never over-commit), check every job's N_i limit, then advance each job by its
allocation's rate for one slot. A job whose work is done finishes in
t and earns f_i((t + 1)·slot - arrival): it ran t - a_i + 1 slots (open point 5). Jobs unfinished
at T earn 0, like rejected ones; Fig. 4 counts them as finishing at T (open point 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stint.mechanism import Mechanism
from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.ps_model import PSPerfModel
from stint.policies.base import JobStatus, Phase, Policy


class ScheduleViolation(RuntimeError):
    """A policy's plan broke a hard constraint (capacity (4)/(5) or the N_i limit (3))."""


@dataclass(slots=True)
class Outcome:
    job_id: str
    arrival_slot: int
    finish_slot: int | None = None  # last slot with workers, None if unfinished or rejected
    utility: float = 0.0
    rejected: bool = False


@dataclass(slots=True)
class EvalResult:
    policy: str
    outcomes: dict[str, Outcome]
    plan_seconds: list[float] = field(default_factory=list)

    @property
    def total_utility(self) -> float:
        return sum(o.utility for o in self.outcomes.values())


def check_capacity(cluster: Cluster, jobs: dict[str, JobStatus], where: str) -> None:
    """Raise :class:`ScheduleViolation` naming the node or job if any constraint is broken."""
    used = np.zeros((cluster.num_nodes, 4))
    for st in jobs.values():
        a, spec = st.allocation, st.spec
        if a.num_workers > spec.max_workers:
            raise ScheduleViolation(f"{where}: job {spec.job_id} has {a.num_workers} workers "
                                    f"> N_i = {spec.max_workers}")
        for node, c in a.workers:
            used[node] += c * np.array(spec.worker_demand.as_tuple())
        for node, c in a.ps:
            assert spec.ps_demand is not None, f"{where}: job {spec.job_id} got PSs but has none"
            used[node] += c * np.array(spec.ps_demand.as_tuple())
    cap = np.array([n.capacity.as_tuple() for n in cluster.nodes])
    over = np.argwhere(used > cap + 1e-6)
    if len(over):
        node, r = over[0]
        raise ScheduleViolation(f"{where}: node {cluster.nodes[node].name} resource {r} "
                                f"uses {used[node, r]:.3f} > capacity {cap[node, r]:.3f}")


def evaluate(policy: Policy, cluster: Cluster, jobs: tuple[JobSpec, ...], horizon: int,
             slot_s: float, change_cost_s: float = 0.0) -> EvalResult:
    """Run ``policy`` over ``horizon`` slots of ``slot_s`` seconds on ``jobs``.

    ``change_cost_s`` charges the mechanism: a job that already ran and whose allocation changes
    (resize, migration, resume) makes no progress for that many seconds of the slot. The paper
    ignores such costs (0, the default); starting a job is free either way.
    """
    perf = PSPerfModel()
    pending = sorted(jobs, key=lambda s: (s.arrival_s, s.job_id))
    active: dict[str, JobStatus] = {}
    mech = Mechanism(cluster, policy, perf)
    out = {s.job_id: Outcome(s.job_id, round(s.arrival_s / slot_s)) for s in jobs}
    result = EvalResult(policy.name, out)
    changed: list[str] = []
    for t in range(horizon):
        now = t * slot_s
        while pending and pending[0].arrival_s <= now + 1e-6:
            spec = pending.pop(0)
            active[spec.job_id] = JobStatus(spec, last_change_s=now)
            changed.append(spec.job_id)
        decision = mech.decide(now, list(active.values()), tuple(changed))
        plan = decision.plan
        result.plan_seconds.append(decision.plan_s)
        changed = []
        moved = _enact(mech, plan, active, now, f"{result.policy} slot {t}")
        for job_id in plan.reject:
            if job_id in active:
                del active[job_id]
                out[job_id].rejected = True
        check_capacity(cluster, active, f"{result.policy} slot {t}")
        for job_id, st in list(active.items()):
            if st.allocation:
                busy = slot_s - (min(change_cost_s, slot_s) if job_id in moved else 0.0)
                st.work_done += perf.rate(st.spec, st.allocation) * busy
            if st.work_done >= st.spec.work * (1 - 1e-9):
                o = out[job_id]
                o.finish_slot = t
                o.utility = float(st.spec.utility((t + 1) * slot_s - st.spec.arrival_s))
                mech.ledger.give(st.spec, st.allocation)
                del active[job_id]
                changed.append(job_id)
    return result


def _enact(mech: Mechanism, plan: Plan, active: dict[str, JobStatus], now: float,
           where: str) -> set[str]:
    """Stage ``plan`` on the ledger and apply it; the ids of jobs whose change costs an action."""
    staged, unknown = mech.stage(plan, active)
    if unknown:
        raise ScheduleViolation(f"{where}: {unknown[0]}")
    if staged.refusals:
        action, why = staged.refusals[0]
        raise ScheduleViolation(f"{where}: {action.kind} refused: {why}")
    return {a.job_id for a in staged.actions if _set_allocation(active[a.job_id], a.after, now)}


def _set_allocation(st: JobStatus | None, alloc: Allocation, now: float) -> bool:
    """Apply an allocation; True if it costs a mechanism action (a job that ran changes)."""
    if st is None or alloc == st.allocation:
        return False
    costly = bool(alloc) and st.first_start_s is not None
    if alloc and st.first_start_s is None:
        st.first_start_s = now
    if not alloc and st.allocation:
        st.preemptions += 1
    st.phase = Phase.RUNNING if alloc else (Phase.PAUSED if st.first_start_s is not None
                                            else Phase.QUEUED)
    st.allocation = alloc if alloc else EMPTY
    st.last_change_s = now
    return costly
