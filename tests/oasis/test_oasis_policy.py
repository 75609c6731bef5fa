"""OASiS behind the common interface, on the slot evaluator; the paper's baselines."""

from dataclasses import replace

import pytest

from stint.experiments.slot_eval import check_capacity, evaluate
from stint.model import Cluster, JobSpec, Node, Resources, SigmoidUtility
from stint.model.allocation import Allocation
from stint.perf.ps_model import ps_job
from stint.policies import make
from stint.policies.base import ClusterView, JobStatus
from stint.policies.oasis import OASiS

BASELINES = ("fifo-fixed", "drf-ps", "rrh", "dorm")


class RecordingOASiS(OASiS):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.log = {}

    def decide(self, spec, now_slot, plan, known=None, now=None):
        sched = super().decide(spec, now_slot, plan, known, now)
        if sched is not None:
            self.log[spec.job_id] = sched
        return sched


def test_oasis_plans_are_enacted_exactly(small_workload):
    wl = small_workload
    pol = RecordingOASiS(slot_s=wl.slot_s, end_slot=wl.horizon, history=wl.jobs)
    res = evaluate(pol, wl.cluster, wl.jobs, wl.horizon, wl.slot_s)  # checks capacity every slot
    admitted = [o for o in res.outcomes.values() if not o.rejected]
    assert admitted and len(admitted) < len(wl.jobs)  # contended: some admitted, some rejected
    assert set(pol.log) == {o.job_id for o in admitted}
    for o in admitted:
        sched = pol.log[o.job_id]
        # an admitted job completes by its committed last slot and earns at least what OASiS
        # planned for (f is non-increasing)
        assert o.finish_slot is not None and o.finish_slot <= sched.last_slot
        assert o.utility >= sched.utility - 1e-9


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_respect_capacity_and_n_limit(name, small_workload):
    wl = small_workload
    kw = {"slot_s": wl.slot_s} if name == "rrh" else {}
    res = evaluate(make(name, **kw), wl.cluster, wl.jobs, wl.horizon, wl.slot_s)
    assert res.total_utility >= 0
    assert any(o.finish_slot is not None for o in res.outcomes.values())


def _cluster(workers=2, ps=1):
    cap_w = Resources(gpu=4, cpu=16, mem_gb=64, net_gbps=20)
    cap_p = Resources(cpu=16, mem_gb=64, net_gbps=40)
    nodes = [Node(f"w{i}", cap_w, "worker") for i in range(workers)]
    nodes += [Node(f"p{i}", cap_p, "ps") for i in range(ps)]
    return Cluster(tuple(nodes))


def _job(job_id, arrival_slot=0, gamma1=50.0, gamma2=0.0, chunks=4, epochs=4, req=2):
    return ps_job(job_id, arrival_slot * 3600.0, chunks=chunks, minibatches=10, epochs=epochs,
                  tau_s=30.0, grad_mb=100.0,
                  worker_demand=Resources(gpu=1, cpu=2, mem_gb=8, net_gbps=2),
                  ps_demand=Resources(cpu=2, mem_gb=8, net_gbps=8),
                  utility=SigmoidUtility(gamma1, gamma2, 3.0), requested_workers=req)


def _view(cluster, jobs, now=0.0, changed=None):
    sts = [JobStatus(j) for j in jobs]
    return ClusterView(now, cluster, sts, cluster.gpu_capacities(), None,
                       tuple(changed if changed is not None else [j.job_id for j in jobs]))


def test_oasis_admits_and_rejects_worthless_job_and_reissues_each_slot():
    c = _cluster()
    good, worthless = _job("good"), _job("zero", gamma1=1e-9)
    pol = OASiS(slot_s=3600.0, end_slot=10)
    plan = pol.plan(_view(c, [good, worthless]))
    assert "zero" in plan.reject and "μ" in plan.reject["zero"]
    assert "good" in plan.allocations and plan.allocations["good"].num_workers > 0
    # each later slot's plan carries that slot's committed allocation, EMPTY after the last
    _, sched = pol.committed["good"]
    after = sched.last_slot + 1
    assert pol.allocation_at("good", after) == Allocation()
    assert pol.allocation_at("good", sched.last_slot).num_workers > 0
    # PSs on PS hosts only, workers on worker hosts only
    a = plan.allocations["good"]
    assert all(c.nodes[n].role == "worker" for n, _ in a.workers)
    assert all(c.nodes[n].role == "ps" for n, _ in a.ps)


def test_mid_slot_arrival_is_planned_into_the_current_slot():
    c = _cluster()
    j = _job("late")
    j = ps_job("late", 1800.0, chunks=4, minibatches=10, epochs=4, tau_s=30.0, grad_mb=100.0,
               worker_demand=j.worker_demand, ps_demand=j.ps_demand, utility=j.utility)
    pol = OASiS(slot_s=3600.0, end_slot=10)
    plan = pol.plan(replace(_view(c, [j], now=1800.0), explain=True))
    assert plan.allocations["late"].num_workers > 0  # it starts now, in the slot under way
    sched = pol.committed["late"][1]
    assert sched.start_slot == 0 and sched.workers[0].sum() > 0
    assert plan.explain["late"].startswith("oasis: admitted (payoff μ = ")
    # the half slot ahead does half a slot's work: the same job arriving on the boundary
    # needs fewer workers (or slots) than this one
    on_time = OASiS(slot_s=3600.0, end_slot=10)
    on_time.plan(_view(c, [replace(j, arrival_s=0.0)], now=0.0))
    whole = on_time.committed["late"][1]
    assert whole.workers.sum() <= sched.workers.sum()
    assert whole.workers[0].sum() * 0.5 < sched.workers[0].sum() or sched.last_slot > 0


def test_mid_slot_arrival_waits_for_its_slot_in_the_paper_rule():
    """``decide`` without ``now`` (the paper's setting): from the next slot boundary."""
    from stint.model.allocation import Plan
    c = _cluster()
    j = replace(_job("late"), arrival_s=1800.0)
    pol = OASiS(slot_s=3600.0, end_slot=10, restart_s=0.0)
    pol.setup(c)
    pol.decide(j, 0, Plan())
    assert pol.committed["late"][1].start_slot == 1


def test_plain_jobspec_without_ps_is_scheduled_in_worker_slots():
    c = _cluster()
    spec = JobSpec("plain", 0.0, 3 * 3600.0, requested_workers=1, max_workers=2,
                   worker_demand=Resources(gpu=1), utility=SigmoidUtility(10.0, 0.0, 2.0))
    pol = OASiS(slot_s=3600.0, end_slot=10)
    plan = pol.plan(_view(c, [spec]))
    _, sched = pol.committed["plain"]
    assert sched.workers.sum() == 3 and sched.ps.size == 0 or sched.ps.sum() == 0
    assert plan.allocations["plain"].num_ps == 0


def test_ps_job_on_cluster_without_ps_hosts_is_rejected_with_reason():
    c = _cluster(ps=0)
    plan = OASiS(slot_s=3600.0, end_slot=10).plan(_view(c, [_job("j")]))
    assert "no node with role 'ps'" in plan.reject["j"]


def test_finished_job_releases_its_remaining_reservation():
    c = _cluster()
    pol = OASiS(slot_s=3600.0, end_slot=10)
    pol.plan(_view(c, [_job("a", epochs=16)]))
    before = pol.worker_prices.load.sum()
    assert before > 0
    pol.plan(_view(c, [], now=3600.0))  # "a" is gone: finished early
    assert pol.worker_prices.load[1:].sum() == pytest.approx(0.0)
    assert "a" not in pol.committed


def test_fifo_fixed_blocks_behind_the_head():
    c = _cluster(workers=1)
    big, small = _job("big", req=4, chunks=4), _job("small", req=1)
    running = JobStatus(_job("run", req=2))
    running.allocation = Allocation.of({0: 2}, {1: 1})
    sts = [running, JobStatus(big), JobStatus(small)]
    plan = make("fifo-fixed").plan(ClusterView(0.0, c, sts, [2, 0], None, ("big", "small")))
    assert plan.allocations == {}  # big (4 GPUs) waits for run's 2; small may not pass it


def test_drf_ps_equalises_identical_jobs_and_respects_n():
    c = _cluster(workers=2)
    jobs = [_job("a", chunks=8), _job("b", chunks=8)]
    plan = make("drf-ps").plan(_view(c, jobs))
    na, nb = plan.allocations["a"].num_workers, plan.allocations["b"].num_workers
    assert abs(na - nb) <= 1 and na + nb == 8  # 8 GPUs in all, shared evenly


def test_rrh_rejects_job_with_no_expected_yield():
    c = _cluster()
    plan = make("rrh", slot_s=3600.0).plan(_view(c, [_job("z", gamma1=1e-6), _job("g")]))
    assert "z" in plan.reject and "g" not in plan.reject


def test_rrh_pauses_a_job_whose_delay_cost_exceeds_its_gain():
    """Continue or pause is "future utility gain minus cost": a long, cheap job that would delay
    urgent ones pauses although its own yield is above the threshold and it would fit."""
    c = _cluster(workers=4)  # 16 GPUs: room for every job below at once
    big = _job("big", gamma1=5.0, chunks=64, epochs=64)  # worth 5 whenever it ends; ~22 slots of work
    urgent = [_job(f"u{i}", gamma1=50.0, gamma2=5.0) for i in range(4)]  # worthless if delayed
    alone, shared = make("rrh", slot_s=3600.0), make("rrh", slot_s=3600.0)
    alone.admitted = {"big"}
    assert alone.plan(_view(c, [big])).allocations["big"].num_workers == 2  # worth it on its own
    shared.admitted = {"big"} | {u.job_id for u in urgent}
    plan = shared.plan(_view(c, [big, *urgent]))
    assert "big" not in plan.allocations  # stays paused
    assert all(plan.allocations[u.job_id].num_workers == 2 for u in urgent)


def test_dorm_keeps_fairness_floor_and_limits_adjustments():
    c = _cluster(workers=2)
    jobs = [_job(f"j{i}", chunks=8) for i in range(4)]
    dorm = make("dorm", fairness_loss=0.0)
    view = _view(c, jobs)
    counts = dorm.solve_counts(view, list(view.jobs))
    assert counts.sum() == 8 and counts.min() >= 2  # DRF gives 2 GPUs each; θ = 0 keeps them


def test_unknown_parameters_fail_clearly():
    with pytest.raises(ValueError, match="slot_s"):
        OASiS(slot_s=0)
    with pytest.raises(ValueError, match="fairness_loss"):
        make("dorm", fairness_loss=2.0)
    with pytest.raises(ValueError, match="b_i"):
        ps_job("x", 0.0, chunks=1, minibatches=1, epochs=1, tau_s=1.0, grad_mb=1.0,
               worker_demand=Resources(net_gbps=10), ps_demand=Resources(net_gbps=5))


def test_check_capacity_names_node_and_job():
    c = _cluster(workers=1)
    st = JobStatus(_job("x", chunks=8))
    st.allocation = Allocation.of({0: 5}, {1: 2})  # 5 GPUs on a 4-GPU node
    with pytest.raises(Exception, match="node w0 resource 0"):
        check_capacity(c, {"x": st}, "test")
    st.allocation = Allocation.of({0: 9})
    with pytest.raises(Exception, match="job x has 9 workers > N_i = 8"):
        check_capacity(c, {"x": st}, "test")


def test_oasis_runs_in_the_event_driven_simulator(small_workload):
    """The same policy object drives ``stint sim``'s engine (ticks every slot, continuous time)."""
    from stint.perf.ps_model import PSPerfModel
    from stint.sim.costs import CostModel
    from stint.sim.engine import Simulator

    wl = small_workload
    slot = evaluate(OASiS(slot_s=wl.slot_s, end_slot=wl.horizon, history=wl.jobs), wl.cluster,
                    wl.jobs, wl.horizon, wl.slot_s)
    pol = OASiS(slot_s=wl.slot_s, end_slot=wl.horizon, history=wl.jobs)
    run = Simulator(wl.cluster, wl.jobs, pol, PSPerfModel(), CostModel(0, 0, 0, 0)).run()
    admitted = {j for j, o in slot.outcomes.items() if not o.rejected}
    done = {r.job_id for r in run.records if r.completed}
    assert admitted <= done  # the same jobs are admitted, and all of them complete
    # continuous time finishes jobs mid-slot, so they earn at least the slot evaluator's utility
    assert run.summary()["total_utility"] >= slot.total_utility - 1e-6


def test_fixed_bounds_from_a_past_workload_are_not_updated_online(small_workload):
    """``bounds=`` (as in benchmarks/oasis_bounds_history.py) fixes U and L: arrivals do not
    move them, unlike the default estimate, which follows the jobs it has seen."""
    from stint.experiments.workload import make_workload

    wl = small_workload
    past = make_workload(1001, len(wl.jobs), horizon=wl.horizon, workers=2, ps=2, scale=0.1)
    probe = make("oasis", slot_s=wl.slot_s, end_slot=wl.horizon, history=past.jobs)
    probe.setup(wl.cluster)
    fixed = probe.estimator.bounds()
    pol = make("oasis", slot_s=wl.slot_s, end_slot=wl.horizon, bounds=fixed)
    evaluate(pol, wl.cluster, wl.jobs, wl.horizon, wl.slot_s)
    assert pol.worker_prices.low == fixed.low_w
    assert (pol.worker_prices.high == fixed.high_w).all()
    online = make("oasis", slot_s=wl.slot_s, end_slot=wl.horizon, history=past.jobs)
    evaluate(online, wl.cluster, wl.jobs, wl.horizon, wl.slot_s)
    assert online.worker_prices.low != fixed.low_w  # the arrivals moved the online estimate


def test_describe_gives_each_slots_worker_and_ps_counts():
    pol = OASiS(slot_s=3600.0, end_slot=10)
    pol.plan(_view(_cluster(), [_job("good")]))
    _, sched = pol.committed["good"]
    text = pol.describe("good", "admitted")
    first = (int(sched.workers[0].sum()), int(sched.ps[0].sum()))
    assert first[1] > 0
    assert f"workers + PSs per slot: slot{'s' if sched.last_slot > sched.start_slot else ''} " \
        f"{sched.start_slot}" in text
    assert f": {first[0]} + {first[1]} PS" in text
