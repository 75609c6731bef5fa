"""The reconciler: diff a plan against what is running and emit actions. Knows no policy.

Used unchanged by the simulator (which charges each action's modelled cost) and by the live
controller (which hands each action to an executor).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from stint.model.allocation import EMPTY, Allocation, Plan


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
    the starts that follow (the order a mechanism should execute them in). Plans naming unknown
    jobs are a policy bug and raise ``KeyError``.
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
