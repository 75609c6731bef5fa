"""The capacity ledger and the one staging step at their edges: a node filled exactly fits and
one unit more does not, for every resource; a swap of which one half is refused is undone."""

from __future__ import annotations

import pytest

from stint.model.allocation import Allocation, Plan
from stint.model.cluster import Cluster, Node
from stint.model.job import JobSpec
from stint.model.resources import RESOURCE_NAMES, Resources
from stint.placement.ledger import Ledger, RefusalCode
from stint.reconcile import ActionKind, stage

CAPACITY = Resources(gpu=4, cpu=32, mem_gb=256, net_gbps=100)


def _one_node() -> Ledger:
    return Ledger(Cluster((Node("n0", CAPACITY),)))


def _demand(resource: int, amount: float) -> Resources:
    """One GPU per worker (a worker needs one) and ``amount`` of ``resource``."""
    values = [1.0, 0.0, 0.0, 0.0]
    values[resource] = amount
    return Resources(*values)


@pytest.mark.parametrize("r", range(4), ids=RESOURCE_NAMES)
def test_a_node_filled_exactly_fits_and_one_unit_more_does_not(r: int) -> None:
    cap = CAPACITY.as_tuple()[r]
    workers = 4 if r == 0 else 2
    exact = JobSpec("exact", 0.0, 1.0, workers, workers, workers,
                    worker_demand=_demand(r, cap / workers if r else 1.0))
    over = JobSpec("over", 0.0, 1.0, workers, workers, workers,
                   worker_demand=_demand(r, (cap + 1) / workers if r else 1.0))
    alloc = Allocation.of({0: workers})
    ledger = _one_node()
    assert ledger.shortfall(exact, alloc) is None
    if r == 0:  # a fifth GPU: one unit over the node's four
        over, alloc = JobSpec("over", 0.0, 1.0, 5, 5, 5), Allocation.of({0: 5})
    why = ledger.shortfall(over, alloc)
    assert why is not None and (why.code, why.resource) == (RefusalCode.CAPACITY, RESOURCE_NAMES[r])
    assert why.short_by == pytest.approx(1.0)
    ledger.take(exact, Allocation.of({0: workers}))
    assert ledger.free[0][r] == pytest.approx(0.0)
    one = JobSpec("one", 0.0, 1.0, 1, 1, 1, worker_demand=_demand(r, 1.0))
    assert ledger.shortfall(one, Allocation.of({0: 1})) is not None  # full: not even one unit


def test_a_swap_whose_second_half_is_refused_is_undone_whole() -> None:
    """a and b swap nodes, but b asks for three GPUs on a 2-GPU node: b is refused and keeps
    node 1, so a's move onto node 1 no longer fits and is undone; the ledger is as before."""
    ledger = Ledger(Cluster.uniform(2, 2))
    specs = {j: JobSpec(j, 0.0, 1.0, 2, 1, 3) for j in "ab"}
    current = {"a": Allocation.of({0: 2}), "b": Allocation.of({1: 2})}
    for j, alloc in current.items():
        ledger.take(specs[j], alloc)
    plan = Plan({"a": Allocation.of({1: 2}), "b": Allocation.of({0: 3})})
    staged = stage(plan, current, {"a": True, "b": True}, specs, ledger)
    assert staged.actions == []
    reasons = {a.job_id: (a.kind, why.code, why.resource) for a, why in staged.refusals}
    assert reasons == {"a": (ActionKind.MIGRATE, RefusalCode.DISPLACED, ""),
                       "b": (ActionKind.RESIZE, RefusalCode.CAPACITY, "gpu")}
    assert ledger.free_gpus == [0, 0] and ledger.used_gpus == 4


def test_a_swap_that_fits_is_carried_out_in_one_plan() -> None:
    ledger = Ledger(Cluster.uniform(2, 2))
    specs = {j: JobSpec(j, 0.0, 1.0, 2, 2, 2) for j in "ab"}
    current = {"a": Allocation.of({0: 2}), "b": Allocation.of({1: 2})}
    for j, alloc in current.items():
        ledger.take(specs[j], alloc)
    plan = Plan({"a": Allocation.of({1: 2}), "b": Allocation.of({0: 2})})
    staged = stage(plan, current, {"a": True, "b": True}, specs, ledger)
    assert [(a.job_id, a.kind) for a in staged.actions] == [("a", ActionKind.MIGRATE),
                                                            ("b", ActionKind.MIGRATE)]
    assert staged.refusals == [] and ledger.free_gpus == [0, 0]
