"""The re-planning variant (beyond the paper): invariants and the case it exists for."""

from stint.experiments.slot_eval import evaluate
from stint.policies import make


def _run(name, wl, cost, **kw):
    pol = make(name, slot_s=wl.slot_s, end_slot=wl.horizon, history=wl.jobs, **kw)
    return pol, evaluate(pol, wl.cluster, wl.jobs, wl.horizon, wl.slot_s, change_cost_s=cost)


def _unfinished_admitted(res):
    return sum(1 for o in res.outcomes.values() if not o.rejected and o.finish_slot is None)


def test_replan_recovers_jobs_whose_plans_mechanism_costs_broke(small_workload):
    wl = small_workload
    _, plain = _run("oasis", wl, 1800.0, redecide_overrun=False)  # the paper's rule
    pol, replan = _run("oasis-replan", wl, 1800.0, change_cost_s=1800.0)
    # plain OASiS' plans ignore resize costs: some admitted jobs run out of plan with work left
    assert _unfinished_admitted(plain) > 0
    assert _unfinished_admitted(replan) < _unfinished_admitted(plain)
    assert pol.replans > 0
    assert replan.total_utility > plain.total_utility


def test_replan_without_costs_admits_like_oasis_and_never_drops_a_job(small_workload):
    wl = small_workload
    _, plain = _run("oasis", wl, 0.0)
    _, replan = _run("oasis-replan", wl, 0.0)
    assert _unfinished_admitted(replan) == 0  # every admitted job still completes
    # the first arrival sees the same empty cluster, so the first decision is the same
    first = min(wl.jobs, key=lambda s: s.arrival_s).job_id
    assert plain.outcomes[first].rejected == replan.outcomes[first].rejected
