"""Each open point of the OASiS summary (§4) is decided; these tests pin the decisions."""

import math

import numpy as np
import pytest

from stint.experiments.oasis_figs import _job_row
from stint.experiments.slot_eval import Outcome, evaluate
from stint.experiments.workload import SLOT_S, make_workload
from stint.model import Cluster, Node, Resources, SigmoidUtility
from stint.perf.ps_model import minibatch_time_s, ps_job
from stint.policies.oasis import OASiS, dp_job
from stint.policies.oasis_bounds import BoundsEstimator, PriceBounds
from stint.policies.oasis_core import DPJob


def test_1_calibration_gives_minimum_durations_of_a_few_slots():
    wl = make_workload(11, 300)
    slots = np.array([s.min_duration_s() / SLOT_S for s in wl.jobs])
    assert 1 <= np.median(slots) <= 10  # paper's targets are 1-15 slots
    assert np.mean(slots <= 20) > 0.8


def test_2_units_tau_in_seconds_e_in_mb_b_in_gbps():
    # 2 x 300 MB over 2.5 Gbit/s = 4800 Mbit / 2500 Mbit/s = 1.92 s, plus τ = 0.05 s
    assert minibatch_time_s(0.05, 300.0, 2.5) == pytest.approx(1.97)


def _scaled_cluster(mem_factor):
    nodes = [Node(f"w{i}", Resources(gpu=4, cpu=16, mem_gb=64 * mem_factor, net_gbps=20),
                  "worker") for i in range(3)]
    nodes += [Node("p0", Resources(cpu=16, mem_gb=32 * mem_factor, net_gbps=40), "ps")]
    return Cluster(tuple(nodes))


def _jobs(mem_factor, n=40):
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        out.append(ps_job(
            f"j{i}", float(rng.integers(0, 4)) * 3600.0, chunks=int(rng.integers(2, 9)),
            minibatches=10, epochs=int(rng.integers(4, 9)), tau_s=60.0, grad_mb=50.0,
            worker_demand=Resources(gpu=1, cpu=2, mem_gb=float(rng.uniform(4, 20)) * mem_factor,
                                    net_gbps=1.0),
            ps_demand=Resources(cpu=2, mem_gb=4.0 * mem_factor, net_gbps=8.0),
            utility=SigmoidUtility(float(rng.uniform(10, 60)), 0.5, 3.0)))
    return tuple(sorted(out, key=lambda s: s.arrival_s))


def test_3_decisions_do_not_depend_on_resource_units():
    # memory in GB or in MB (x1024): normalised shares make every decision identical
    results = []
    for f in (1.0, 1024.0):
        jobs = _jobs(f)
        res = evaluate(OASiS(slot_s=3600.0, end_slot=12, history=jobs), _scaled_cluster(f), jobs,
                       12, 3600.0)
        results.append({k: (o.rejected, o.finish_slot) for k, o in res.outcomes.items()})
    assert results[0] == results[1]
    assert {r for r, _ in results[0].values()} == {True, False}  # contended: both outcomes


def _dp(utility, wd=(0.5, 0.5, 0.5, 0.5), work_units=4, n=2):
    return DPJob(0, n, work_units, 1.0, 0.5, np.array(wd), np.array(wd), np.asarray(utility))


def test_4_L_ignores_jobs_worth_nothing_at_the_horizon_and_eta_is_optional():
    est = BoundsEstimator(horizon=10, worker_cap_share=4.0, ps_cap_share=4.0, nres=4)
    critical = _dp(np.r_[40.0, np.zeros(9)])  # time-critical: f(T - a) = 0
    insensitive = _dp(np.full(10, 20.0))
    est.observe(critical)
    est.observe(insensitive)
    b = est.bounds()
    # L = 1/4 of the lowest density among jobs still worth something at T: 20 / (4 x 2.0) / 4
    assert b.low_w == pytest.approx(20.0 / (4 * 2.0) / 4)
    # U^r = max f(shortest) / w^r: the critical job's 40 over 0.5 (shortest run: 2 slots -> f=0)
    assert b.high_w == pytest.approx(np.full(4, 20.0 / 0.5))
    paper = BoundsEstimator(10, 4.0, 4.0, 4, use_eta=True)
    paper.observe(critical)
    paper.observe(insensitive)
    eta = 10 * 4.0 / (4 * 2.0)  # T Σc / (W Σw) of the smallest job
    assert paper.bounds().low_w == pytest.approx(b.low_w / eta)
    assert b.alpha == pytest.approx(max(1.0, math.log(40.0 / b.low_w)))


def test_4_fig6_scale_multiplies_both_U_and_L():
    b = PriceBounds(0.5, np.array([4.0, 8.0]), 0.25, np.array([2.0, 2.0]))
    s = b.scaled(0.2)
    assert s.low_w == pytest.approx(0.1) and s.high_w == pytest.approx([0.8, 1.6])
    assert s.alpha == pytest.approx(b.alpha)  # the ratio is unchanged


def test_5_a_job_finishing_in_its_arrival_slot_ran_one_slot():
    util = SigmoidUtility(10.0, 1.0, 1.0)  # f(1 slot) = 5
    job = ps_job("j", 0.0, chunks=2, minibatches=1, epochs=1, tau_s=60.0, grad_mb=1.0,
                 worker_demand=Resources(cpu=1, net_gbps=1.0),
                 ps_demand=Resources(cpu=1, net_gbps=1.0), utility=util)
    c = Cluster((Node("w", Resources(cpu=8, net_gbps=10), "worker"),
                 Node("p", Resources(cpu=8, net_gbps=10), "ps")))
    pol = OASiS(slot_s=3600.0, end_slot=4)
    res = evaluate(pol, c, (job,), 4, 3600.0)
    assert res.outcomes["j"].finish_slot == 0
    assert res.outcomes["j"].utility == pytest.approx(5.0)
    dj = dp_job(job, 0, 4, 3600.0, pol.groups, 64)
    assert dj.utility[0] == pytest.approx(5.0)  # the DP values t̂ = a_i as 1 slot too


def test_6_unfinished_jobs_count_as_finishing_at_T():
    wl = make_workload(2, 5, horizon=20)
    spec = wl.jobs[0]
    row = _job_row({}, wl, Outcome(spec.job_id, 3))
    assert row["delta"] == pytest.approx(20 - 3 - spec.utility.gamma3)
    assert row["finished"] is False


def test_7_worker_hosts_have_gpus_ps_hosts_do_not():
    wl = make_workload(1, 1)
    roles = {n.role for n in wl.cluster.nodes}
    assert roles == {"worker", "ps"}
    assert all(n.capacity.gpu > 0 for n in wl.cluster.nodes if n.role == "worker")
    assert all(n.capacity.gpu == 0 for n in wl.cluster.nodes if n.role == "ps")


def test_10_large_jobs_use_coarser_quanta_small_jobs_exact_chunks():
    wl = make_workload(4, 40)
    pol = OASiS(slot_s=wl.slot_s, end_slot=wl.horizon)
    pol.setup(wl.cluster)
    for spec in wl.jobs:
        dj = dp_job(spec, 0, wl.horizon, wl.slot_s, pol.groups, 64)
        chunks = spec.epochs * spec.chunks
        assert dj.quanta == min(chunks, 64)
        assert dj.quanta * dj.quantum_ws == pytest.approx(spec.work / wl.slot_s)
    small = dp_job(wl.jobs[0], 0, wl.horizon, wl.slot_s, pol.groups, 10**6)
    s = wl.jobs[0]
    # exact: one unit is a chunk of M_i mini-batches, M_i (τ_i + 2e_i/b_i) worker-seconds
    assert small.quantum_ws * wl.slot_s == pytest.approx(s.minibatches * s.minibatch_s)
