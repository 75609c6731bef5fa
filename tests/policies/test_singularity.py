"""Singularity's rules on tiny traces, hand-computed (STYLE principle 10).

One node of 4 GPUs; the scaling model runs a job at 1 work unit/s on its requested size (linear
scaling elsewhere), so work is seconds at the requested size. Mechanism costs are free so that
times are exact; the policy still charges its own ``restart_s`` (30 s) in its decisions.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from stint.model import Cluster, JobSpec, Plan
from stint.model.job import Tier, divisor_counts
from stint.model.resources import Resources
from stint.model.sla import SlaTargets, attainment
from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.policies.base import ClusterView, JobStatus, PolicyBase
from stint.policies.singularity import Facts, Singularity
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator
from stint.sim.metrics import JobRecord, tier_summary
from stint.sim.traces import TierMix, load


def job(jid: str, arrival: float, gpus: int, seconds: float, tier: Tier,
        lo: int | None = None, hi: int | None = None) -> JobSpec:
    lo, hi = lo or gpus, hi or gpus
    return JobSpec(jid, arrival, seconds, gpus, lo, hi, tier=tier, est_s=seconds,  # declared exactly
                   worker_counts=divisor_counts(hi, lo, hi) if hi > lo else ())


class Recorder(PolicyBase):
    """Wraps a policy; keeps every non-empty explanation it gave."""

    def __init__(self, inner: PolicyBase) -> None:
        self.inner, self.name, self.tick_s, self.lazy_progress = inner, inner.name, inner.tick_s, True
        self.explained: list[tuple[float, str, str]] = []

    def next_due(self) -> float | None:
        return self.inner.next_due()

    def plan(self, view: ClusterView) -> Plan:
        plan = self.inner.plan(view)
        self.explained += [(view.now, j, why) for j, why in sorted(plan.explain.items())]
        return plan


def run(jobs: list[JobSpec], **opts: float) -> tuple[dict[str, JobRecord], Recorder]:
    pol = Recorder(make("singularity", **opts))  # type: ignore[arg-type]
    res = Simulator(Cluster.uniform(1, 4), jobs, pol, ScalingModel(), CostModel.free()).run()
    return {r.job_id: r for r in res.records}, pol


def test_premium_preempts_a_rigid_basic_job() -> None:
    # B (basic, 4 GPUs, 1000 s) fills the node at 0. P (premium, 2 GPUs, 100 s) arrives at 10:
    # nothing free; B cannot shrink (rigid), so it is preempted (gain 2 x 100 GPU-s > cost
    # 30 s x 4 GPUs). P runs 10-110 (JCT 100, attainment 1). B resumes at 110 with 990 s left:
    # it ends at 1100.
    r, pol = run([job("B", 0, 4, 1000, Tier.BASIC), job("P", 10, 2, 100, Tier.PREMIUM)])
    assert (r["P"].jct_s, r["B"].finish_s, r["B"].preemptions) == (100, 1100, 1)
    assert r["P"].attainment == 1.0
    assert (10.0, "B", "preempted for premium job P") in pol.explained


def test_premium_shrinks_an_elastic_basic_job_before_preempting() -> None:
    # B (basic) runs on 4 (counts 1, 2, 4). P (premium, 2 GPUs) at 10: rule 3(b) shrinks B just
    # enough, to 2 workers, rather than preempting it. B is not preempted.
    r, pol = run([job("B", 0, 4, 1000, Tier.BASIC, lo=1, hi=4), job("P", 10, 2, 100, Tier.PREMIUM)])
    assert r["B"].preemptions == 0 and r["B"].resizes >= 1
    assert r["P"].jct_s == 100
    assert (10.0, "B", "shrunk to 2 workers for premium job P") in pol.explained


def test_a_standard_job_without_slack_is_not_touched() -> None:
    # S (standard, 4 GPUs, 100 s) at 0: latest finish meeting 0.70 is 60 + 100 / 0.7 = 202.9 s.
    # At 10 its slack is 202.9 - (10 + 30 + 90) = 72.9 s, less than the 330 s a preemption costs
    # it (restart 30 s + min_hold 300 s): P (premium) waits until S ends at 100.
    r, _ = run([job("S", 0, 4, 100, Tier.STANDARD), job("P", 10, 2, 100, Tier.PREMIUM)])
    assert r["S"].preemptions == 0 and r["S"].jct_s == 100
    assert r["P"].first_start_s == 100


def test_a_basic_job_does_not_preempt_another_basic_job() -> None:
    # Same tier: no preemption (rule 3 takes only strictly lower tiers), so no thrash.
    r, _ = run([job("A", 0, 4, 100, Tier.BASIC), job("B", 10, 2, 10, Tier.BASIC)])
    assert r["A"].preemptions == 0 and r["B"].first_start_s == 100


@pytest.mark.parametrize("long_s, preempted", [(10000, True), (1000, False)])
def test_a_standard_job_takes_from_a_less_urgent_one_of_its_tier(long_s: float, preempted: bool) -> None:
    # L (standard, 4 GPUs) fills the node at 0; S (standard, 1 GPU, 100 s) at 400. S's slack:
    # deadline 400 + 60 + 100 / 0.7 = 602.9, minus 400 + 30 + 100: 72.9 s. L of 10000 s: deadline
    # 60 + 10000 / 0.7 = 14345.7, slack 14345.7 - 430 - 9600 = 4315.7, after a preemption
    # (30 + 300) 3985.7 > 72.9 + 300: L is preempted, S runs 400-500 and L ends at 10100.
    # L of 1000 s: slack 1488.6 - 430 - 600 = 458.6, after 128.6 < 372.9: S waits for L (1000).
    r, pol = run([job("L", 0, 4, long_s, Tier.STANDARD), job("S", 400, 1, 100, Tier.STANDARD)])
    assert r["L"].preemptions == int(preempted)
    if preempted:
        assert (r["S"].jct_s, r["L"].finish_s) == (100, 10100)
        assert (400.0, "L", "preempted for standard job S") in pol.explained
    else:
        assert r["S"].first_start_s == 1000


def test_a_premium_job_reclaims_rather_than_start_too_spread_out() -> None:
    # 2 nodes x 2 GPUs, each node beyond the first halves a job's speed. Basic 1-GPU jobs: A
    # (1000 s) and B (5 s) fill node 0 at 0, C (1000 s) takes node 1 at 1; B ends at 5, leaving
    # one GPU free on each node. P (premium, 2 GPUs, 100 s) at 10 would take 200 s on two nodes
    # (attainment 100 / (200 + 30 - 60) < 0.95): a basic job is taken off a node instead and P
    # runs on that one node, 10-110; the basic job fits the GPU left on the other node and moves
    # there (rule 7) rather than wait.
    jobs = [job("A", 0, 1, 1000, Tier.BASIC), job("B", 0, 1, 5, Tier.BASIC), job("C", 1, 1, 1000, Tier.BASIC),
            job("P", 10, 2, 100, Tier.PREMIUM)]
    res = Simulator(Cluster.uniform(2, 2), jobs, make("singularity"), ScalingModel(spread_penalty=0.5),
                    CostModel.free()).run()
    r = {x.job_id: x for x in res.records}
    assert r["P"].jct_s == 100 and r["A"].preemptions + r["C"].preemptions == 0
    assert r["A"].migrations + r["C"].migrations == 1


def test_basic_jobs_wait_by_response_ratio_not_arrival() -> None:
    # A (basic) holds the node 0-1000; B (10000 s) comes at 10, C (100 s) at 20. At 1000 the
    # projected attainments are B 10000 / (1000 + 30 + 10000 - 10 - 60) = 0.90 and C
    # 100 / (1000 + 30 + 100 - 20 - 60) = 0.10: C, the lower, goes first (1000-1100), then B.
    r, _ = run([job("A", 0, 4, 1000, Tier.BASIC), job("B", 10, 4, 10000, Tier.BASIC),
                job("C", 20, 4, 100, Tier.BASIC)])
    assert (r["C"].first_start_s, r["B"].first_start_s) == (1000, 1100)


def test_an_elastic_job_starts_on_idle_gpus_up_to_its_maximum() -> None:
    # E requests 2 of max 4 (counts 1, 2, 4), alone: rule 7 gives it all 4 (saves 1000 - 500 s
    # > 2 x 30 s), so its 1000 s of work at 2 workers take 500 s.
    r, pol = run([job("E", 0, 2, 1000, Tier.BASIC, lo=1, hi=4)])
    assert r["E"].jct_s == 500
    assert (0.0, "E", "started on 4 workers (2 requested) into idle GPUs") in pol.explained


def test_it_gives_back_grown_gpus_first() -> None:
    # E (premium) grows into all 4 GPUs at 0. A basic job B (2 GPUs) at 10: rule 3(a) returns E
    # to its requested 2 workers, although E outranks B; nobody is preempted.
    r, pol = run([job("E", 0, 2, 1000, Tier.PREMIUM, lo=1, hi=4), job("B", 10, 2, 100, Tier.BASIC)])
    assert r["E"].preemptions == 0 and r["B"].first_start_s == 10
    assert (10.0, "E", "gave back GPUs for basic job B") in pol.explained


def test_attainment_charges_nothing_within_the_allowance() -> None:
    assert attainment(100, 160) == 1.0  # 160 - 60 = 100
    assert attainment(100, 260) == 0.5  # 100 / (260 - 60)
    assert attainment(100, 0) == 1.0
    with pytest.raises(ValueError, match="must be >= 0"):
        attainment(-1, 10)


def test_tier_summary_counts_targets_per_tier() -> None:
    def rec(jid: str, tier: str, jct: float, rejected: str = "") -> JobRecord:
        return JobRecord(jid, 0, 0, jct, 1, 1, 1, 1, 0, 0, 0, 0, rejected, 100, tier=tier, sla_ideal_s=100)

    # premium: 160 s (attainment 1) and 200 s (100 / 140 = 0.714 < 0.95): half meet the target.
    got = tier_summary([rec("a", "premium", 160), rec("b", "premium", 200), rec("c", "basic", 0, "no")],
                       SlaTargets())
    assert got["premium"]["sla_met_fraction"] == 0.5
    assert got["premium"]["mean_attainment"] == pytest.approx((1 + 100 / 140) / 2)
    assert got["basic"] == {**got["basic"], "completed": 0, "sla_met_fraction": 0.0, "mean_attainment": 0.0}
    assert "standard" not in got


def test_tier_mix_parses_and_names_bad_input() -> None:
    mix = TierMix.parse("premium=0.1,standard=0.3,basic=0.6")
    assert (mix.draw(0.05), mix.draw(0.35), mix.draw(0.5)) == (Tier.PREMIUM, Tier.STANDARD, Tier.BASIC)
    with pytest.raises(ValueError, match="sum to 1"):
        TierMix.parse("premium=0.5,basic=0.6")
    with pytest.raises(ValueError, match="gold"):
        TierMix.parse("gold=1")


def test_mechanism_gpu_hours_count_the_modelled_delays() -> None:
    # Default costs: start 0 s, resume 30 s. B (4 GPUs) is preempted for P at 10 and resumes on
    # 4 GPUs when P ends: 30 s x 4 GPUs = 120 GPU-s held without progress; P's start is free.
    jobs = [job("B", 0, 4, 1000, Tier.BASIC), job("P", 10, 2, 100, Tier.PREMIUM)]
    res = Simulator(Cluster.uniform(1, 4), jobs, make("singularity"), ScalingModel(), CostModel()).run()
    assert res.summary()["mechanism_gpu_hours"] == pytest.approx(120 / 3600)


def test_only_a_job_larger_than_the_cluster_is_rejected() -> None:
    # Rule 1: 8 GPUs at its smallest on a 4-GPU cluster; the other job is admitted and runs.
    r, _ = run([job("X", 0, 8, 10, Tier.PREMIUM), job("Y", 0, 4, 10, Tier.BASIC)])
    assert r["X"].rejected == "needs 8 GPUs at its smallest; the cluster has 4"
    assert r["Y"].completed and r["Y"].jct_s == 10


class Rebuilding(PolicyBase):
    """Wraps a policy; hides ``by_id`` (so that it rebuilds what it keeps of the jobs at every
    pass) and the ledger's free index (so that it places by scanning the nodes)."""

    def __init__(self, inner: Singularity) -> None:
        self.inner, self.name, self.tick_s, self.lazy_progress = inner, inner.name, inner.tick_s, True

    def next_due(self) -> float | None:
        return self.inner.next_due()

    def plan(self, view: ClusterView) -> Plan:
        return self.inner.plan(replace(view, by_id=None, stream=None, free_index=None))


def test_what_it_keeps_between_passes_changes_no_decision() -> None:
    # The active jobs by state (``Roster``) are kept from ``changed``, and a pass's first
    # placement reads the ledger's free index: on a tiered elastic workload that shrinks, grows,
    # preempts and time-slices, every job's record equals the one of a run where the policy
    # rebuilds them at every pass and scans the nodes.
    trace = load("pollux:6", tiers=TierMix.parse("premium=0.1,standard=0.3,basic=0.6"))
    jobs = [replace(j, arrival_s=j.arrival_s / 4) for j in trace.jobs[:80]]  # four times the load
    runs = [Simulator(Cluster.uniform(4, 4), jobs, pol, trace.perf, CostModel()).run().records
            for pol in (Singularity(), Rebuilding(Singularity()))]
    kept, rebuilt = ({r.job_id: r for r in recs} for recs in runs)
    assert kept == rebuilt
    assert sum(r.preemptions + r.resizes for r in kept.values()) > 0


class Counting(Singularity):
    """Counts the facts a run computes."""

    def __init__(self) -> None:
        super().__init__()
        self.computed: list[str] = []

    def _facts(self, view: ClusterView, st: JobStatus) -> Facts:
        self.computed.append(st.job_id)
        return super()._facts(view, st)


def test_a_pass_reads_running_jobs_only_when_a_waiting_job_does_not_fit() -> None:
    # Four rigid 1-GPU jobs arrive one by one on 4 GPUs and each fits: every arrival's pass
    # computes the newcomer's facts only (no victim order, no rule 7 without an elastic job),
    # and the completions' passes, with nobody waiting, none.
    pol = Counting()
    jobs = [job(f"J{i}", i, 1, 100 + i, Tier.STANDARD) for i in range(4)]
    res = Simulator(Cluster.uniform(1, 4), jobs, pol, ScalingModel(), CostModel.free()).run()
    assert all(r.completed for r in res.records)
    assert pol.computed == ["J0", "J1", "J2", "J3"]
def test_a_critical_basic_job_starts_before_shorter_ones() -> None:
    # X (premium, 4 GPUs) holds the node 0-100. L (basic, 1 GPU, 1000 s) comes at 10, twelve
    # 1-GPU jobs of 100 s at 20. At 100 their projected attainments are L 1000 / (100 + 30 +
    # 1000 - 10 - 60) = 0.94 and S 100 / (100 + 30 + 100 - 20 - 60) = 0.67, but the drain time
    # is (1000 + 12 x 100) / 4 = 550 s < L's 1000: L is critical (rule 8) and starts first, the
    # twelve run three at a time beside it, and the last job ends at 1100, not 400 + 1000.
    jobs = [job("X", 0, 4, 100, Tier.PREMIUM), job("L", 10, 1, 1000, Tier.BASIC)]
    jobs += [job(f"S{i:02d}", 20, 1, 100, Tier.BASIC) for i in range(12)]
    r, _ = run(jobs)
    assert r["L"].first_start_s == 100 and max(x.finish_s for x in r.values()) == 1100


def test_a_critical_basic_job_preempts_basic_ones_that_are_not() -> None:
    # Four 1-GPU basic jobs of 500 s fill the node at 0. L (basic, 2 GPUs, 2000 s) at 10: drain
    # time (4 x 490 + 2 x 2000) / 4 = 1490 s < 2000, so L is critical and preempts two of them
    # (equal surplus: job id), which resume at 500 when the other two end. L ends at 2010, not
    # at 2500 as when it waited (rule 3 without rule 8: basic never takes from basic).
    jobs = [job(f"S{i}", 0, 1, 500, Tier.BASIC) for i in range(4)] + [job("L", 10, 2, 2000, Tier.BASIC)]
    r, pol = run(jobs)
    assert (r["L"].first_start_s, r["L"].finish_s) == (10, 2010)
    assert [r[f"S{i}"].preemptions for i in range(4)] == [1, 1, 0, 0]
    assert (10.0, "S0", "preempted for basic job L") in pol.explained


def test_the_drain_time_counts_every_job_over_the_gpus_up() -> None:
    # Remaining GPU-seconds at the requested size over the GPUs of the nodes up: (2 x 100 +
    # 1 x 50) / (8 - 4) = 62.5 s with one of two 4-GPU nodes down.
    cluster = Cluster.uniform(2, 4)
    a, b = JobStatus(job("A", 0, 2, 100, Tier.BASIC)), JobStatus(job("B", 0, 1, 50, Tier.BASIC))
    view = ClusterView(0.0, cluster, [a, b], [0, 4], ScalingModel(), down_nodes=frozenset({0}))
    assert Singularity()._drain(view, {"A": a, "B": b}) == 62.5


def test_a_time_sliced_job_takes_the_measured_overhead_longer() -> None:
    # P (premium, 2 GPUs) holds half the node from 0 to 5000. W (basic, requests 4 of counts
    # 1, 2, 4) at 1 finds 2 GPUs free and no lower tier to take from: it starts time-sliced on
    # 2 workers (rule 3 (c)), at half its rate less the SDK's 1.4 %: 1000 s of work take
    # 2 x 1000 x 1.014 = 2028 s, so it ends at 2029 (2001 at the ideal rate).
    r, pol = run([job("P", 0, 2, 5000, Tier.PREMIUM), job("W", 1, 4, 1000, Tier.BASIC, lo=1, hi=4)])
    assert r["W"].finish_s == pytest.approx(2029.0)
    assert (1.0, "W", "started time-sliced on 2 of 4 workers") in pol.explained


def test_a_critical_job_is_its_tier_s_last_victim() -> None:
    # L (basic, 2 GPUs, 10000 s) and X (basic, 2 GPUs, 100 s) start at 0; S (basic, 2 GPUs,
    # 200 s) arrives at 1 and starts at 100. P (premium, 2 GPUs) at 150 needs a victim. By
    # surplus L (projected 10000 / (150 + 30 + 9850 - 60), capped at 1) would go before S
    # (200 / (150 + 30 + 150 - 1 - 60) = 0.74), but L is critical (drain time (2 x 9850 + 2 x
    # 150) / 4 = 5075 s < 9850), so S is preempted (rule 3 (ii)).
    r, pol = run([job("L", 0, 2, 10000, Tier.BASIC), job("X", 0, 2, 100, Tier.BASIC),
                  job("S", 1, 2, 200, Tier.BASIC), job("P", 150, 2, 100, Tier.PREMIUM)])
    assert (r["L"].preemptions, r["S"].preemptions) == (0, 1)
    assert (150.0, "S", "preempted for premium job P") in pol.explained


def test_a_pass_that_finds_it_must_reclaim_is_planned_again_with_the_drain_time() -> None:
    # Two nodes of 2 GPUs. A and B (basic, 5000 s) and X and Y (basic, 100 s) fill them, one
    # long and one short job a node; X and Y end at 101 and 103. L (basic, one worker of 2 GPUs,
    # 20000 s) at 200 asks for 2 GPUs and 2 are free, so the pass starts without rule 8's drain
    # time; but they are on two nodes, and a basic job takes nothing from its tier unless it is
    # critical. Planned again with the drain time ((2 x 4800 + 2 x 20000) / 4 = 12400 s <
    # 20000), L is critical and takes B's node to start at once, not at 5000 when A and B end;
    # B, which fits the GPU left free on A's node, moves there (rule 7) instead of waiting.
    two = replace(job("L", 200, 1, 20000, Tier.BASIC), worker_demand=Resources(gpu=2))
    jobs = [job("A", 0, 1, 5000, Tier.BASIC), job("X", 1, 1, 100, Tier.BASIC),
            job("B", 2, 1, 5000, Tier.BASIC), job("Y", 3, 1, 100, Tier.BASIC), two]
    pol = Recorder(make("singularity"))  # type: ignore[arg-type]
    res = Simulator(Cluster.uniform(2, 2), jobs, pol, ScalingModel(), CostModel.free()).run()
    r = {x.job_id: x for x in res.records}
    assert r["L"].first_start_s == 200
    assert (r["B"].preemptions, r["B"].migrations, r["B"].finish_s) == (0, 1, 5002)
    assert (200.0, "B", "migrated for basic job L") in pol.explained


def _random_jobs(seed: int) -> tuple[ClusterView, Singularity]:
    """400 random running and waiting jobs of every tier on 64 nodes of 8 GPUs, some elastic,
    some grown, some past their known length, and a fresh policy that has read them."""
    import random

    from stint.model.allocation import Allocation
    from stint.policies.base import Phase

    rnd = random.Random(seed)
    cluster = Cluster.uniform(64, 8)
    tiers = (Tier.PREMIUM, Tier.STANDARD, Tier.BASIC)
    sts: list[JobStatus] = []
    for i in range(400):
        g = rnd.choice((1, 2, 4, 8))
        spec = job(f"j{i}", rnd.uniform(0, 5000), g, rnd.uniform(10, 20000), rnd.choice(tiers),
                   *((1, g) if rnd.random() < 0.3 else (None, None)))
        if i < 10:  # ties: same arrival, attainment capped at 1
            spec = replace(spec, arrival_s=100.0)
        running = rnd.random() < 0.7
        alloc = Allocation.of({i % 64: g}) if running else Allocation.of({})
        sts.append(JobStatus(spec, Phase.RUNNING if running else Phase.PAUSED, alloc,
                             work_done=rnd.uniform(0, spec.work / 2), rate=rnd.uniform(0.2, 1.5) if running else 0.0,
                             as_of_s=rnd.choice((None, 5000.0)) if running else None,
                             est_work=spec.work / rnd.choice((1, 8, 64)) if rnd.random() < 0.3 else None))
    by_id = {st.job_id: st for st in sts}
    view = ClusterView(6000.0, cluster, sts, [8] * 64, ScalingModel(), by_id=by_id, stream=1)
    pol = make("singularity")
    assert isinstance(pol, Singularity)
    pol._roster.sync(view)
    return view, pol


def test_the_table_finds_the_per_job_victim_order_and_drain_time() -> None:
    # Rules 2, 3 and 8 walk many jobs; the policy computes these walks on columns
    # (policies/singularity_table.py). On random running and waiting jobs, with and without a
    # drain time, they must be exactly what the per-job facts give: the orders of
    # Facts.victim_key and Facts.serve_key and the drain time summed job by job in the view's order.
    view, pol = _random_jobs(7)
    sts, by_id, cluster = list(view.jobs), view.by_id or {}, view.cluster
    work, up = 0.0, cluster.total_gpus
    for st in sts:
        f = pol._facts(view, st)
        if f.rate_req > 0:
            work += st.known_remaining_at(view.now) / f.rate_req * st.spec.requested_workers \
                * st.spec.gpus_per_worker
    assert pol._drain(view, by_id) == work / up
    for drain in (None, work / up, 3000.0):
        facts = [pol._facts(view, st) for st in sts if st.allocation]
        if drain is not None:
            facts = [f.as_critical() if f.remaining_s > drain else f for f in facts]
        want = [f.job_id for f in sorted(facts, key=Facts.victim_key)]
        got = pol._victim_order(view, by_id, drain)
        assert got.ids == want
        assert got.critical == [f.critical for f in sorted(facts, key=Facts.victim_key)]
        assert got.slack.tolist() == [f.slack_s for f in sorted(facts, key=Facts.victim_key)]
        assert any(got.critical) == (drain == 3000.0)
        waiting = [pol._facts(view, st) for st in sts if not st.allocation]
        if drain is not None:
            waiting = [f.as_critical() if f.remaining_s > drain else f for f in waiting]
        waiting.sort(key=Facts.serve_key)
        queue = pol._serve_order(view, by_id, [st.job_id for st in sts if not st.allocation], drain)
        assert queue.ids == [f.job_id for f in waiting]
        assert queue.slack == [f.slack_s for f in waiting]
        assert queue.remaining == [f.remaining_s for f in waiting]
        assert queue.on_time == [f.on_time for f in waiting]
        assert queue.critical == [f.critical for f in waiting]
        assert {f.on_time for f in waiting} == {True, False} and any(f.late for f in waiting)


def test_the_victims_of_a_waiting_job_are_those_it_could_take_from_found_ordered_or_not() -> None:
    # A waiting job that misses its target even at its packed rate stages one victim, any one,
    # and that staging is discarded (rule 3 cannot start it on a placement meeting its target):
    # its victims come unordered, without the pass sorting the running jobs. They must be the
    # very victims, step by step, that the ordered walk offers; and of its own tier, the walk
    # leaves out only jobs that rule 4 keeps whole (too little slack for a restart and the margin).
    from stint.model.allocation import Plan as PlanOf
    from stint.policies.singularity import Staging, Victims

    view, pol = _random_jobs(11)
    by_id = view.by_id or {}
    drain = 3000.0  # some jobs critical (rule 8)

    def fact(jid: str) -> Facts:
        f = pol._facts(view, by_id[jid])
        return f.as_critical() if f.remaining_s > drain else f

    def pool(ordered: bool) -> Victims:
        def order() -> object:
            assert ordered, "the unordered victims sorted the running jobs"
            return pol._victim_order(view, by_id, drain)
        return Victims(by_id, order, fact, lambda j: pol._rank(view, by_id[j]),  # type: ignore[arg-type]
                       pol._roster.running, pol._roster.elastic)

    taken = PlanOf(allocations={st.job_id: st.allocation for st in list(view.jobs)[:40] if st.allocation})
    kinds, left_out = set(), 0
    for st in view.jobs:
        if st.allocation:
            continue
        w = fact(st.job_id)
        kinds.add((w.rank, w.on_time, w.leads))
        want = [[v.job_id for v in step] for step in pol._victims(w, pool(True), taken)]
        got = [[v.job_id for v in step] for step in pol._any_victims(w, pool(False), taken)]
        assert [sorted(g) for g in got] == [sorted(x) for x in want]
        assert any(want[2]) or w.rank == 0
        for j in pol._roster.running - set(want[2]) - set(taken.allocations):
            v = fact(j)
            if v.rank == w.rank and (w.on_time or w.leads and not v.critical):
                left_out += 1
                assert not pol._reclaim(view, "preempt", w, v, Staging(list(view.free_gpus), {}, {}))
    assert left_out > 100
    assert {(0, False, True), (1, True, False), (2, False, False)} <= kinds  # leads, on time, late


def test_a_job_past_its_known_length_is_held_to_the_longer_job_s_deadline() -> None:
    # P (premium) was declared 100 s; at 160 it has done 150 (1 work unit/s), so it is believed
    # to be 200 s long: its deadline is the one of a 200 s job, arrival + 60 + 200 / 0.95 = 270.5
    # (not the 100 s job's, 165.3, already too close: it would count as late and lose its place).
    from stint.model.sla import deadline_s
    from stint.policies.base import Phase

    spec = job("P", 0.0, 1, 1000.0, Tier.PREMIUM)
    st = JobStatus(spec, Phase.PAUSED, work_done=150.0, est_work=100.0)
    view = ClusterView(160.0, Cluster.uniform(1, 4), [st], [4], ScalingModel(), by_id={"P": st}, stream=1)
    pol = make("singularity")
    assert isinstance(pol, Singularity)
    f = pol._facts(view, st)
    assert f.remaining_s == 50.0 and f.on_time
    assert f.slack_s == deadline_s(0.0, 200.0, 0.95) - 160.0 - 30.0 - 50.0
