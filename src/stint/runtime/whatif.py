""""Will it fit, and when": a submission forecast without storing it (``stint submit
--test-only``, ``POST /v1/jobs/dry-run``).

The live state is read as the controller sees it (the active jobs' statuses, the nodes), the
forecast (``sim.forecast``: the live policy replayed from now, with the cost model fitted from the
cluster's measured attempts) is made twice, without and with the job submitted now, and the two
are compared: whether the job is admissible (``infeasible``: it cannot run here; ``fits-now``: it
starts at once on free GPUs; ``needs-preemption``: it starts at once by stopping or shrinking
others; ``waits``: it starts later), its estimated start and finish, and which jobs it would delay
(their start or finish later with it than without) and by how much. The basis is the forecast's.
"""

from __future__ import annotations

from dataclasses import dataclass

from stint.perf.scaling import ScalingModel
from stint.policies.base import JobStatus
from stint.policies.registry import make_with_options
from stint.reconcile import Action, ActionKind
from stint.runtime.measured import fitted_costs, policy_of
from stint.runtime.schemas import DelayOut, DryRunOut
from stint.runtime.states import ENDING_STOPS, TERMINAL, JobState
from stint.runtime.store import Caller, NewJob, Store, _job_values
from stint.runtime.tables import Job
from stint.runtime.view import cluster_of, status_of
from stint.sim.forecast import BASIS, Estimate, forecast

PERF = ScalingModel()  # the controller's
EPS = 1e-6
MAX_JOBS = 1000  # a state of more active jobs is not forecast (the controller's bound)


@dataclass(frozen=True, slots=True)
class Delay:
    """How much later another job would start (if waiting) and finish with the new one."""

    job_id: int
    start_s: float | None
    finish_s: float | None


@dataclass(frozen=True, slots=True)
class DryRun:
    admissible: str  # "infeasible", "fits-now", "needs-preemption" or "waits"
    reason: str
    est_start_at: float | None  # wall seconds (None: not within the forecast)
    est_finish_at: float | None
    delays: tuple[Delay, ...]
    policy: str
    basis: str = BASIS


def infeasible(reason: str, policy: str) -> DryRun:
    return DryRun("infeasible", reason, None, None, (), policy)


def out_of(d: DryRun) -> DryRunOut:
    """The API's answer."""
    return DryRunOut(admissible=d.admissible, reason=d.reason, est_start_at=d.est_start_at,
                     est_finish_at=d.est_finish_at, policy=d.policy, basis=d.basis,
                     delays=[DelayOut(job_id=x.job_id, start_s=x.start_s, finish_s=x.finish_s)
                             for x in d.delays])


def _sees(job: Job) -> bool:
    """The active jobs the policy sees (as ``controller._policy_sees``, single cluster)."""
    return (job.state not in TERMINAL and not job.cancel_requested and job.retry_at is None
            and job.cluster is None and not (job.state == JobState.CHECKPOINTING
                                             and job.stop_purpose in ENDING_STOPS))


def what_if(store: Store, spec: NewJob, caller: Caller, now: float, fallback_policy: str) -> DryRun:
    """The forecast of ``spec`` submitted by ``caller`` at ``now`` (wall seconds)."""
    name, options = policy_of(store) or (fallback_policy or "fifo", ())
    epoch = store.epoch(now)
    t = now - epoch
    nodes = [(n.name, n.gpus) for n in store.nodes() if n.cluster == "" and n.state != "down"]
    users = store.user_names()
    rows = store.list_jobs(Caller(0, "", True), [str(s) for s in JobState if s not in TERMINAL],
                           limit=1_000_000)
    active = [status_of(j, users.get(j.user_id, ""), epoch, PERF, None, t) for j in rows if _sees(j)]
    new = Job(id=store.max_job_id() + 1, **_job_values(spec, caller, now), holding_since=None,
              first_start_at=None, target=None, stop_purpose=None, pin_workers=None)
    mine = status_of(new, caller.name, epoch, PERF, None, t)
    if not nodes or not any(c <= sum(g for _, g in nodes) for c in mine.spec.feasible_counts()):
        return infeasible("no worker count of the job fits the nodes that are up", name)
    if len(active) > MAX_JOBS:
        free = sum(g for _, g in nodes) - sum(st.allocation.num_workers for st in active)
        fits = mine.spec.requested_workers <= free
        return DryRun("fits-now" if fits else "waits", f"more than {MAX_JOBS} active jobs: not "
                      "forecast; " + ("enough GPUs are free now" if fits else "not enough GPUs "
                                      "are free now"), None, None, (), name)
    fitted = fitted_costs(store, limit=500)
    costs = fitted.costs if any(fitted.samples.values()) else None
    cluster = cluster_of(nodes)
    before = forecast(cluster, active, make_with_options(name, options), PERF, t, costs)
    acts: list[tuple[float, Action]] = []
    after = forecast(cluster, [*active, mine], make_with_options(name, options), PERF, t, costs,
                     actions=acts)
    est = after[mine.job_id]
    rejected = next((a for _, a in acts if a.job_id == mine.job_id
                     and a.kind is ActionKind.REJECT), None)
    if rejected is not None:
        return infeasible(f"policy {name} would reject it"
                          + (f": {rejected.reason}" if rejected.reason else ""), name)
    delays = _delays(before, after, active)
    verdict, why = _verdict(est.start_s, t, acts, mine.job_id)
    return DryRun(verdict, why, None if est.start_s is None else epoch + est.start_s,
                  None if est.finish_s is None else epoch + est.finish_s, delays, name)


def _verdict(start: float | None, t: float, acts: list[tuple[float, Action]],
             job: str) -> tuple[str, str]:
    if start is None:
        return "waits", "it does not start within the forecast's horizon"
    if start > t + EPS:
        return "waits", f"it starts in {start - t:.0f} s, when the policy gives it GPUs"
    taken = sorted({a.job_id for at, a in acts if at <= t + EPS and a.job_id != job
                    and a.kind in (ActionKind.PREEMPT, ActionKind.RESIZE, ActionKind.MIGRATE)})
    if taken:
        return "needs-preemption", ("it starts now by stopping or shrinking job(s) "
                                    + ", ".join(taken))
    return "fits-now", "it starts now on free GPUs"


def _delays(before: dict[str, Estimate], after: dict[str, Estimate],
            active: list[JobStatus]) -> tuple[Delay, ...]:
    """The jobs that start (if waiting) or finish later with the new job than without it."""
    out = []
    for st in active:
        b, a = before[st.job_id], after[st.job_id]
        start = _later(b.start_s, a.start_s) if not st.allocation else None
        finish = _later(b.finish_s, a.finish_s)
        if (start or 0.0) > EPS or (finish or 0.0) > EPS:
            out.append(Delay(int(st.job_id), start, finish))
    return tuple(sorted(out, key=lambda d: -(d.finish_s or d.start_s or 0.0)))


def _later(b: float | None, a: float | None) -> float | None:
    """Seconds ``a`` is after ``b`` (None if either is beyond the horizon)."""
    if a is None or b is None:
        return None
    return max(0.0, a - b)
