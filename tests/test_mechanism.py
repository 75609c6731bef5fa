"""The mechanism core's one rule for a plan naming a job the policy was not shown: dropped, with
an ``unknown`` refusal that each loop reports as it reports any refusal (the simulator's and the
controller's runs go on; the slot evaluator, which admits no refusal, stops)."""

from __future__ import annotations

import pytest
from builders import rigid

from stint.experiments.slot_eval import ScheduleViolation, evaluate
from stint.mechanism import Mechanism, known_plan
from stint.model import Allocation, Cluster, Plan
from stint.perf.scaling import ScalingModel
from stint.placement.ledger import RefusalCode
from stint.policies.base import ClusterView, JobStatus, PolicyBase


class _Stray(PolicyBase):
    """Starts every waiting job on node 0 and names a job that is not there."""

    name = "stray"

    def plan(self, view: ClusterView) -> Plan:
        return Plan({st.job_id: Allocation.of({0: 1}) for st in view.jobs if not st.allocation}
                    | {"ghost": Allocation.of({0: 1})}, {"phantom": "no"})


def test_known_plan_drops_what_the_view_did_not_hold_with_a_refusal_each() -> None:
    plan = Plan({"a": Allocation.of({0: 1}), "ghost": Allocation.of({0: 1})},
                {"b": "too big", "phantom": "no"}, {"a": "started"})
    kept, refused = known_plan(plan, {"a": None, "b": None})
    assert kept.allocations == {"a": Allocation.of({0: 1})} and kept.reject == {"b": "too big"}
    assert kept.explain == {"a": "started"}
    assert [(r.job_id, r.code) for r in refused] == [("ghost", RefusalCode.UNKNOWN),
                                                     ("phantom", RefusalCode.UNKNOWN)]
    same, none = known_plan(plan, dict.fromkeys(["a", "b", "ghost", "phantom"]))
    assert same is plan and none == []


def test_the_mechanism_stages_the_rest_of_a_plan_naming_an_unknown_job() -> None:
    cluster = Cluster.uniform(1, 2)
    mech = Mechanism(cluster, _Stray(), ScalingModel())
    known = {"a": JobStatus(rigid("a", 0.0, 10.0))}
    decision = mech.decide(0.0, list(known.values()), ("a",))
    staged, unknown = mech.stage(decision.plan, known)
    assert [(a.kind, a.job_id) for a in staged.actions] == [("start", "a")]
    assert [r.job_id for r in unknown] == ["ghost", "phantom"]
    assert mech.ledger.free_gpus == [1]  # only the known job's GPU is taken


def test_the_slot_evaluator_stops_at_a_plan_naming_an_unknown_job() -> None:
    cluster = Cluster.uniform(1, 2)
    with pytest.raises(ScheduleViolation, match="stray slot 0: job ghost: unknown"):
        evaluate(_Stray(), cluster, (rigid("a", 0.0, 10.0),), 2, 60.0)
