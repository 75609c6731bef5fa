"""What every mechanism does alike around a policy's call: when a decision is due, the view the
policy is shown, and the rule for a plan that names a job the view did not hold.

The simulator (``sim/engine.py``), the live controller (``runtime/controller.py``) and the slot
evaluator of the OASiS figures (``experiments/slot_eval.py``) each keep their own clock and carry
out accepted actions their own way (modelled delays; store intents and executor calls; one slot's
progress); these three steps they take from here, and staging from ``reconcile.stage``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from stint.model.allocation import Plan
from stint.model.cluster import Cluster
from stint.perf.model import PerfModel
from stint.placement.ledger import Ledger, Refusal, RefusalCode
from stint.policies.base import ClusterView, JobStatus, Policy

_EPS = 1e-9  # slots: a boundary computed as k x tick_s is boundary k, whatever its rounding


def next_tick(policy: Policy, after: float) -> float | None:
    """The first slot boundary of ``policy``'s ticks after ``after`` at which it may change its
    plan: a multiple of ``tick_s``, none before its ``next_due()``; None if no tick can."""
    tick, due = policy.tick_s, policy.next_due()
    if not tick or due is None:
        return None
    return max((math.floor(after / tick + _EPS) + 1) * tick, math.ceil(due / tick - _EPS) * tick)


def tick_passed(policy: Policy, last: float, now: float) -> bool:
    """True if a tick ``policy`` may act on fell in ``(last, now]``."""
    at = next_tick(policy, last)
    return at is not None and at <= now + _EPS


def view_of(now: float, cluster: Cluster, jobs: Sequence[JobStatus], ledger: Ledger,
            perf: PerfModel, changed: Sequence[str], *, by_id: Mapping[str, JobStatus] | None = None,
            stream: int | None = None, history: int | None = None,
            explain: bool = False) -> ClusterView:
    """The policy's view: the capacity fields always from ``ledger`` (free GPUs and resources,
    nodes down, the free index), so placement takes one code path in every mechanism."""
    return ClusterView(now, cluster, jobs, ledger.free_gpus, perf, changed, by_id=by_id,
                       stream=stream, free_resources=ledger.free, history=history,
                       down_nodes=frozenset(ledger.down), explain=explain,
                       free_index=ledger.by_free)


def known_plan(plan: Plan, known: Mapping[str, object]) -> tuple[Plan, list[Refusal]]:
    """``plan`` without the jobs it names that the view did not hold (finished, or never there:
    a policy's bug), and a refusal for each, which the mechanism reports as it reports any."""
    unknown = [j for j in (*plan.allocations, *plan.reject) if j not in known]
    if not unknown:
        return plan, []
    kept = Plan({j: a for j, a in plan.allocations.items() if j in known},
                {j: r for j, r in plan.reject.items() if j in known}, plan.explain, plan.waiting)
    return kept, [Refusal(j, RefusalCode.UNKNOWN, "not an active job the policy was shown")
                  for j in unknown]
