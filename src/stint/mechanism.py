"""The mechanism core every executor of plans shares: it owns the policy and the capacity
ledger, says when a decision is due, builds the one view the policy is shown, runs the policy,
drops what a plan names that the view did not hold, and stages the plan on the ledger.

The simulator (``sim/engine.py``), the live controller (``runtime/controller.py``) and the slot
evaluator of the OASiS figures (``experiments/slot_eval.py``) each hold a ``Mechanism``; what they
keep is their own clock and how they carry out the accepted actions (modelled delays; store
intents and executor calls; one slot's progress).
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from stint.model.allocation import Plan
from stint.model.cluster import Cluster
from stint.perf.model import PerfModel
from stint.placement.ledger import Ledger, Refusal, RefusalCode
from stint.policies.base import ClusterView, JobStatus, Policy
from stint.reconcile import Action, ActionKind, Staged, stage

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


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's plan for one view, and how long the policy took to make it (its latency
    only: never a scheduling input)."""

    plan: Plan
    plan_s: float


class Mechanism:
    """A policy and the ledger its plans are staged on, over one cluster and performance model.

    ``ledger`` is the capacity after every accepted action; the live controller, which rebuilds
    it from the store at each step, replaces it (``ledger = ...``) before deciding.
    """

    def __init__(self, cluster: Cluster, policy: Policy, perf: PerfModel,
                 ledger: Ledger | None = None) -> None:
        self.cluster = cluster
        self.policy = policy
        self.perf = perf
        self.ledger = ledger if ledger is not None else Ledger(cluster)

    def next_tick(self, after: float) -> float | None:
        return next_tick(self.policy, after)

    def tick_passed(self, last: float, now: float) -> bool:
        return tick_passed(self.policy, last, now)

    def decide(self, now: float, jobs: Sequence[JobStatus], changed: Sequence[str], *,
               by_id: Mapping[str, JobStatus] | None = None, stream: int | None = None,
               history: int | None = None, explain: bool = False) -> Decision:
        """The policy's plan for ``jobs`` at ``now``. A policy that reads progress directly
        (not ``lazy_progress``) sees every running job's progress settled to ``now``."""
        if not self.policy.lazy_progress:
            for st in jobs:
                if st.allocation:
                    st.settle(now)
        view = view_of(now, self.cluster, jobs, self.ledger, self.perf, changed, by_id=by_id,
                       stream=stream, history=history, explain=explain)
        t0 = time.perf_counter()
        plan = self.policy.plan(view)
        return Decision(plan, time.perf_counter() - t0)

    def stage(self, plan: Plan, known: Mapping[str, JobStatus], *,
              has_run: Mapping[str, bool] | None = None, pinned: Collection[str] = ()
              ) -> tuple[Staged, list[Refusal]]:
        """Stage ``plan`` on the ledger: the accepted and refused actions, and the refusals of
        what it named that ``known`` does not hold. A job in ``pinned`` keeps its allocation
        (refused as pinned). ``has_run`` says which jobs ran before (a start or a resume); by
        default those with a first start."""
        plan, unknown = known_plan(plan, known)
        held = [(Action(ActionKind.MIGRATE, j, known[j].allocation, plan.allocations[j]),
                 Refusal(j, RefusalCode.PINNED, "pinned by an operator (stint unpin)"))
                for j in plan.allocations if j in pinned]
        if held:
            plan = Plan({j: a for j, a in plan.allocations.items() if j not in pinned},
                        plan.reject, plan.explain, plan.waiting)
        named = [*plan.allocations, *plan.reject]
        ran = has_run if has_run is not None else \
            {j: known[j].first_start_s is not None for j in named}
        staged = stage(plan, {j: known[j].allocation for j in named}, {j: ran[j] for j in named},
                       {j: known[j].spec for j in named}, self.ledger)
        return Staged(staged.actions, held + staged.refusals), unknown
