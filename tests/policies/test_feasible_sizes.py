"""Feasible sizes are part of the model: no registered policy ever plans a worker count a job
cannot run on (an SDK job runs on the divisors of its logical ranks), and the enactment refuses
one if a policy did."""

from __future__ import annotations

import pytest

from stint.model import Allocation, Cluster, JobSpec, Plan
from stint.model.job import divisor_counts
from stint.perf.scaling import ScalingModel
from stint.placement.ledger import Ledger
from stint.policies import available, make
from stint.policies.base import ClusterView, Policy, PolicyBase
from stint.reconcile import stage
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator

OPTIONS = {"oasis": {"slot_s": 10.0, "horizon_slots": 80}, "oasis-replan": {"slot_s": 10.0, "horizon_slots": 80},
           "rrh": {"slot_s": 10.0, "threshold": 0.0}, "optimus": {"tick_s": 10.0}, "tiresias": {"tick_s": 10.0}}


def _elastic_jobs() -> list[JobSpec]:
    """Jobs with 6 or 4 logical ranks on an 8-GPU cluster: counts 1, 2, 3, 6 or 1, 2, 4."""
    out = []
    for i in range(12):
        logical = 6 if i % 2 else 4
        req = 2
        out.append(JobSpec(str(i), 3.0 * i, 40.0 + 7 * (i % 5), req, 1, logical,
                           worker_counts=divisor_counts(logical, 1, logical), est_s=40.0 + 7 * (i % 5)))
    return out


class _Checked(PolicyBase):
    """Wraps a policy and records every planned allocation whose worker count is infeasible."""

    def __init__(self, inner: Policy) -> None:
        self.inner, self.name, self.tick_s = inner, inner.name, inner.tick_s
        self.lazy_progress = inner.lazy_progress
        self.bad: list[tuple[str, int]] = []
        self.sizes: set[int] = set()

    def next_due(self) -> float | None:
        return self.inner.next_due()

    def plan(self, view: ClusterView) -> Plan:
        plan = self.inner.plan(view)
        by_id = {st.job_id: st for st in view.jobs}
        for jid, alloc in plan.allocations.items():
            n = alloc.num_workers
            self.sizes.add(n)
            if n and not by_id[jid].spec.can_run_on(n):
                self.bad.append((jid, n))
        return plan


@pytest.mark.parametrize("name", available())
def test_no_policy_plans_an_infeasible_worker_count(name: str) -> None:
    pol = _Checked(make(name, **OPTIONS.get(name, {})))
    res = Simulator(Cluster.uniform(2, 4), _elastic_jobs(), pol, ScalingModel(), CostModel.free()).run()
    assert pol.bad == []
    assert res.refusals == []
    assert pol.sizes - {0}, f"{name} planned nothing"


def test_staging_refuses_an_infeasible_count_with_the_feasible_ones() -> None:
    spec = JobSpec("j", 0.0, 10.0, 2, 1, 4, worker_counts=(1, 2, 4))
    staged = stage(Plan({"j": Allocation.of({0: 3})}), {"j": Allocation()}, {"j": False},
                   {"j": spec}, Ledger(Cluster.uniform(1, 4)))
    assert staged.actions == []
    (_, why), = staged.refusals
    assert "3 workers is not a size the job can run on (1, 2, 4)" in str(why)


def test_worker_counts_must_include_the_request() -> None:
    with pytest.raises(ValueError, match="worker_counts"):
        JobSpec("j", 0.0, 10.0, 3, 1, 4, worker_counts=(1, 2, 4))
