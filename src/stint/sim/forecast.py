"""When will it start: the simulator run forward from a live state, with the same policy.

``forecast`` takes the active jobs as the live controller sees them (``JobStatus`` with their
allocations and progress, times on the store's clock), a fresh policy of the same name and
options, and the performance model, and replays the future in which nothing else arrives and
every job needs exactly its declared length. It returns, per job, when it would (re)start and
finish. The basis is stated with the figures: a fresh policy (it does not know the live one's
history: Tiresias' queue-entry times, OASiS' commitments are rebuilt from the state), declared or
default lengths, no further arrivals, no failures. With a cost model fitted from the live
cluster's attempts (``sim.costs.fit``) each start, resume and stop costs what it measured.

``band`` gives each waiting job's start band: the same forecast with the fitted costs' 10th
percentiles and the remaining lengths ``LENGTH_BAND[0]`` times the declared ones, and with their
90th percentiles and ``LENGTH_BAND[1]`` times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from stint.model.cluster import Cluster
from stint.perf.model import PerfModel
from stint.policies.base import JobStatus, Policy
from stint.reconcile import Action, ActionKind
from stint.sim.costs import CostModel, FittedCosts
from stint.sim.engine import Simulator

BASIS = ("if nothing else arrives and every job runs its declared length (the policy replayed "
         "from now by the simulator)")


@dataclass(frozen=True, slots=True)
class Estimate:
    """A job's forecast, on the clock of the state it was made from; None: not within it."""

    start_s: float | None  # when it next gets GPUs (now, for a job that holds them)
    finish_s: float | None
    order: int | None = None  # a waiting job's place among the forecast's starts (0 = first)


LENGTH_BAND = (0.9, 1.1)  # the declared lengths' spread the start band allows for
HORIZON_S = 86_400.0  # a forecast looks one day ahead at most (its cost is bounded by it)


def forecast(cluster: Cluster, active: Sequence[JobStatus], policy: Policy, perf: PerfModel,
             now: float, costs: CostModel | None = None,
             horizon_s: float = HORIZON_S,
             actions: list[tuple[float, Action]] | None = None) -> dict[str, Estimate]:
    """Estimated (re)start and finish of every job in ``active`` from ``now``, up to
    ``now + horizon_s`` (beyond it: None); ``actions`` (if given) receives every action the
    replayed policy takes, with its time."""
    starts: dict[str, float] = {st.job_id: now for st in active if st.allocation}
    order: dict[str, int] = {}  # waiting jobs in the order the policy starts them

    def record(t: float, a: Action) -> None:
        if actions is not None:
            actions.append((t, a))
        if a.kind in (ActionKind.START, ActionKind.RESUME) and a.job_id not in starts:
            starts[a.job_id] = t
            order[a.job_id] = len(order)

    sim = Simulator(cluster, (), policy, perf, costs or CostModel.free(), on_action=record,
                    resume_from=active, start_s=now, end_s=now + horizon_s)
    finished = {r.job_id: r.finish_s for r in sim.run().records
                if r.completed and r.finish_s <= now + horizon_s}
    return {st.job_id: Estimate(starts.get(st.job_id), finished.get(st.job_id),
                                order.get(st.job_id)) for st in active}


def _scaled(active: Sequence[JobStatus], factor: float) -> list[JobStatus]:
    """The jobs with ``factor`` times their length (never less than they have done)."""
    out = []
    for st in active:
        work = max(st.spec.work * factor, st.work_done + 1e-9)
        est = None if st.est_work is None else max(st.est_work * factor, 1e-9)
        out.append(replace(st, spec=replace(st.spec, work=work), est_work=est))
    return out


def band(cluster: Cluster, active: Sequence[JobStatus], make: Callable[[], Policy],
         perf: PerfModel, now: float, fitted: FittedCosts | None,
         point: Mapping[str, Estimate]) -> dict[str, tuple[float | None, float | None]]:
    """Each waiting job's (earliest, latest) estimated start: the optimistic and pessimistic
    forecasts (low costs and lengths, high costs and lengths) and ``point``, the median one.
    A bound is None when that forecast does not start the job within its horizon."""
    lo = forecast(cluster, _scaled(active, LENGTH_BAND[0]), make(), perf, now,
                  fitted.low if fitted else None)
    hi = forecast(cluster, _scaled(active, LENGTH_BAND[1]), make(), perf, now,
                  fitted.high if fitted else None)
    out: dict[str, tuple[float | None, float | None]] = {}
    for st in active:
        if st.allocation:
            continue
        j = st.job_id
        got = [x for x in (lo[j].start_s, point[j].start_s, hi[j].start_s) if x is not None]
        late = None if hi[j].start_s is None or point[j].start_s is None else max(got)
        out[j] = (min(got) if got else None, late)
    return out
