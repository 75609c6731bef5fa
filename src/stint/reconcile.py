"""The reconciler: diff a plan against what is running, stage it on the capacity ledger, and
emit actions. Knows no policy.

``stage`` is the one enactment step of every mechanism: the simulator (which charges each
action's modelled cost), the live controller (which hands each action to an executor) and the slot
evaluator of the OASiS figures all call it, so a plan is carried out, or refused, the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from stint.model.allocation import EMPTY, Allocation, Plan
from stint.model.job import JobSpec
from stint.placement.ledger import Ledger, Refusal, RefusalCode


class ActionKind(StrEnum):
    START = "start"  # first allocation of a queued job
    RESUME = "resume"  # allocation for a job that was preempted before
    PREEMPT = "preempt"  # allocation taken away entirely: checkpoint and stop
    RESIZE = "resize"  # number of workers changes
    MIGRATE = "migrate"  # same number of workers, different nodes
    REJECT = "reject"  # admission refused; the job leaves with zero utility


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    job_id: str
    before: Allocation
    after: Allocation
    reason: str = ""


def classify(before: Allocation, after: Allocation, has_run: bool) -> ActionKind | None:
    """The action that turns ``before`` into ``after``, or None if nothing changes."""
    if before == after:
        return None
    if not after:
        return ActionKind.PREEMPT
    if not before:
        return ActionKind.RESUME if has_run else ActionKind.START
    if after.num_workers != before.num_workers:
        return ActionKind.RESIZE
    return ActionKind.MIGRATE


def reconcile(
    plan: Plan, current: Mapping[str, Allocation], has_run: Mapping[str, bool]
) -> list[Action]:
    """Actions that carry ``plan`` out, given each active job's ``current`` allocation.

    Preemptions and shrinking resizes come first so that the capacity they free is available to
    the starts that follow (the order a mechanism should execute them in). Every job the plan
    names must be in ``current`` (``mechanism.known_plan`` drops the others first).
    """
    actions: list[Action] = []
    for job_id, reason in plan.reject.items():
        actions.append(Action(ActionKind.REJECT, job_id, current.get(job_id, EMPTY), EMPTY, reason))
    for job_id, after in plan.allocations.items():
        before = current[job_id]
        kind = classify(before, after, has_run.get(job_id, False))
        if kind is not None:
            actions.append(Action(kind, job_id, before, after))
    actions.sort(key=_execution_order)
    return actions


def _execution_order(a: Action) -> int:
    if a.kind in (ActionKind.REJECT, ActionKind.PREEMPT):
        return 0
    if a.kind is ActionKind.RESIZE and a.after.num_workers < a.before.num_workers:
        return 1
    return 2


@dataclass(frozen=True, slots=True)
class Staged:
    """A plan staged on a ledger: the actions to carry out, in execution order, and the actions
    refused with why (a refused job keeps the allocation it had)."""

    actions: list[Action]
    refusals: list[tuple[Action, Refusal]]


def stage(plan: Plan, current: Mapping[str, Allocation], has_run: Mapping[str, bool],
          specs: Mapping[str, JobSpec], ledger: Ledger) -> Staged:
    """Check ``plan`` as a whole against ``ledger`` and charge what it changes.

    Everything the plan takes away is released first, then every new allocation is acquired in
    execution order, so jobs may swap nodes within one plan. An allocation that does not fit, or
    whose worker count the job cannot run on, is refused (its job keeps its allocation); if
    keeping it no longer fits, the actions accepted last are refused too until it does. On return
    the ledger holds the state after the accepted actions.
    """
    actions = reconcile(plan, current, has_run)
    for a in actions:
        ledger.give(specs[a.job_id], a.before)
    accepted: list[Action] = []
    refused: list[tuple[Action, Refusal]] = []
    for a in actions:
        spec = specs[a.job_id]
        why = _infeasible(spec, a.after) or ledger.shortfall(spec, a.after)
        if why is None:
            ledger.take(spec, a.after)
            accepted.append(a)
        else:
            refused.append((a, why))
    keep = [a for a, _ in refused]  # refused jobs keep their allocation
    i = 0
    while i < len(keep):
        a = keep[i]
        spec = specs[a.job_id]
        if ledger.fits(spec, a.before) or not accepted:
            ledger.take(spec, a.before)
            i += 1
            continue
        last = accepted.pop()  # only when a swap was partly refused: undo the latest acceptance
        ledger.give(specs[last.job_id], last.after)
        refused.append((last, Refusal(last.job_id, RefusalCode.DISPLACED,
                                      f"job {a.job_id} keeps its allocation")))
        keep.append(last)
    return Staged(accepted, refused)


def _infeasible(spec: JobSpec, after: Allocation) -> Refusal | None:
    n = after.num_workers
    if n and not spec.can_run_on(n):
        return Refusal(spec.job_id, RefusalCode.INVALID_SIZE,
                       f"{n} workers is not a size the job can run on {spec.feasible_counts()}")
    return None
