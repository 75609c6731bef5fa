"""Hand-computed schedules of each baseline on tiny traces (STYLE principle 10).

Every expected number is derived in a comment. Actions are free (``CostModel.free()``) so that
times are exact, and the scaling model runs every job at 1 work unit/s on its requested size,
so a job's work is its run time in seconds.
"""

import pytest
from builders import records, rigid  # type: ignore[import-not-found]

from stint.model import Cluster
from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.sim.costs import CostModel
from stint.sim.engine import NodeFailure

# One node of 4 GPUs. A: t=0, 2 GPUs, 100 s. B: t=10, 4 GPUs, 30 s. C: t=20, 1 GPU, 10 s.
ABC = [rigid("A", 0, 100, 2, declared=True), rigid("B", 10, 30, 4, declared=True), rigid("C", 20, 10, 1, declared=True)]


def test_fifo_blocks_behind_the_head():
    r = records(make("fifo"), ABC)
    # A runs 0-100. B (4 GPUs) cannot start while A holds 2; C queues behind B (no backfill).
    # B runs 100-130 (JCT 130-10=120); C runs 130-140 (JCT 140-20=120).
    assert {k: v.jct_s for k, v in r.items()} == {"A": 100, "B": 120, "C": 120}
    assert sum(v.preemptions for v in r.values()) == 0


def test_sjf_backfills_the_short_job():
    r = records(make("sjf"), ABC)
    # A runs 0-100. At 20 the waiting order is C (10 s) then B (30 s): C fits on the 2 free GPUs
    # and runs 20-30 (JCT 10). B starts when A ends: 100-130 (JCT 120).
    assert {k: v.jct_s for k, v in r.items()} == {"A": 100, "B": 120, "C": 10}


def test_srtf_preempts_for_shorter_remaining_time():
    r = records(make("srtf"), ABC)
    # t=10: B (30 s left) < A (90 s left): A is preempted, B runs from 10.
    # t=20: C (10 s) < B (20 s left): B is preempted, C takes 1 GPU; A (90 s) backfills 2 GPUs.
    # t=30: C ends (JCT 10). B (20 s) < A (80 s left): A preempted again, B runs 30-50 (JCT 40).
    # t=50: A resumes with 80 s left and ends at 130 (JCT 130).
    assert {k: v.jct_s for k, v in r.items()} == {"A": 130, "B": 40, "C": 10}
    assert (r["A"].preemptions, r["B"].preemptions, r["C"].preemptions) == (2, 1, 0)


def test_tiresias_demotes_after_threshold_then_preempts():
    r = records(make("tiresias", thresholds_gpu_s=(100.0,), tick_s=5.0, strict_order=False), ABC)
    # t=0: A starts in Q0. t=10: B (Q0) cannot fit and may not preempt A (same queue).
    # t=20: C (Q0) backfills the 2 free GPUs, runs 20-30 (JCT 10).
    # t=50: A has 2 GPUs x 50 s = 100 GPU-s: demoted to Q1 (seen at the tick at 50), so B (Q0)
    # preempts it and runs 50-80 (JCT 70). A resumes at 80 with 50 s left: ends 130 (JCT 130).
    assert {k: v.jct_s for k, v in r.items()} == {"A": 130, "B": 70, "C": 10}
    assert r["A"].preemptions == 1 and r["B"].preemptions == 0


def test_tiresias_preempts_within_a_queue_by_default():
    r = records(make("tiresias", thresholds_gpu_s=(100.0,), tick_s=5.0), ABC)
    # The default (strict order, the paper's algorithm). As with strict_order=False until 50:
    # A demoted (Q1, entered 50), B (Q0) preempts it. B reaches 100 GPU-s at 75 (4 GPUs x 25 s)
    # and enters Q1 after A, so A, first in the order, preempts B: A runs its
    # last 50 s 75-125 (JCT 125), then B its last 5 s 125-130 (JCT 120). Pollux's Tiresias
    # re-derives who runs from the queue order at every pass and behaves the same way.
    assert {k: v.jct_s for k, v in r.items()} == {"A": 125, "B": 120, "C": 10}
    assert r["A"].preemptions == 1 and r["B"].preemptions == 1


def test_tiresias_starvation_promotion():
    # One GPU, threshold 10 GPU-s, ticks every 5 s. L: t=0, 30 s; short jobs S1: t=15, 20 s;
    # S2: t=35, 20 s; S3: t=55, 20 s.
    jobs = [rigid("L", 0, 30, 1, declared=True), rigid("S1", 15, 20, 1, declared=True),
            rigid("S2", 35, 20, 1, declared=True), rigid("S3", 55, 20, 1, declared=True)]
    one_gpu = Cluster.uniform(1, 1)
    # strict_order=False: a demoted job never preempts one of its own queue (the rule-5 story
    # below reads more simply without in-queue preemption).
    plain = records(make("tiresias", thresholds_gpu_s=(10.0,), tick_s=5.0, strict_order=False), jobs, one_gpu)
    # Without promotion: L is in Q1 from 10; each short job arrives in Q0 and runs: S1 preempts L
    # at 15 and runs 15-35, S2 35-55, S3 55-75; L resumes at 75 with 15 s left and ends at 90.
    assert plain["L"].finish_s == 90
    knob = records(make("tiresias", thresholds_gpu_s=(10.0,), promote_knob=1.0, tick_s=5.0, strict_order=False),
               jobs, one_gpu)
    # With PROMOTE_KNOB 1: L, paused at 15 after executing 15 s, is promoted at 30 and preempts
    # S1 (Q1 since 25). L is demoted again at 40 (10 GPU-s after promotion) and S2 (Q0) preempts
    # it; L, having executed 10 s since promotion, is promoted at 50. S1 (paused at 30 after
    # 15 s) was promoted at 45 and is ahead of L in Q0: it runs its last 5 s 50-55. Then L runs
    # its last 5 s 55-60, ahead of S3 (entered Q0 at 55 > L's 50).
    assert knob["L"].finish_s == 60
    assert knob["S1"].finish_s == 55


def test_drf_serves_the_user_with_the_smaller_dominant_share():
    # One node: 4 GPUs, 16 CPUs. User a's X holds 1 GPU + 8 CPUs: dominant share max(1/4, 8/16)
    # = 0.5 (CPU). User b's Y holds 1 GPU + 1 CPU: share max(1/4, 1/16) = 0.25 (GPU).
    # At t=1: a2, a3 (user a) and b2 (user b) arrive, each 1 GPU + 2 CPUs, 10 s; 2 GPUs are free.
    cluster = Cluster.uniform(1, 4, cpu_per_gpu=4.0)
    jobs = [
        rigid("X", 0, 100, 1, user="a", cpu=8, declared=True), rigid("Y", 0, 100, 1, user="b", cpu=1, declared=True),
        rigid("a2", 1, 10, 1, user="a", cpu=2, declared=True), rigid("a3", 1, 10, 1, user="a", cpu=2, declared=True),
        rigid("b2", 1, 10, 1, user="b", cpu=2, declared=True),
    ]
    r = records(make("drf"), jobs, cluster)
    # DRF: b (0.25) first -> b2 starts; b's share becomes max(2/4, 3/16) = 0.5. b has nothing
    # left waiting, so a2 starts (a: 0.5). GPUs are full; a3 starts at 11 when a2/b2 end (JCT 20).
    assert (r["b2"].jct_s, r["a2"].jct_s, r["a3"].jct_s) == (10, 10, 20)
    f = records(make("fifo"), jobs, cluster)
    # FIFO, by arrival then id: a2 and a3 take the 2 GPUs at 1; b2 waits until 11 (JCT 20).
    assert (f["b2"].jct_s, f["a2"].jct_s, f["a3"].jct_s) == (20, 10, 10)


def test_restart_cost_delays_progress():
    # FIFO with a 30 s start cost: a 100 s job arriving at 5 holds its GPU from 5 but progresses
    # only from 35, so it completes at 135 (JCT 130).
    r = records(make("fifo"), [rigid("A", 5, 100, 1, declared=True)], costs=CostModel(start_s=30.0))
    assert r["A"].jct_s == pytest.approx(130.0)
    assert r["A"].work_received == pytest.approx(100.0)


def test_node_failure_preempts_and_the_job_resumes_elsewhere():
    # Two nodes of 2 GPUs. A (2 GPUs, 100 s) starts on a node at 0 (best fit: node 0). Node 0 fails
    # at 10: A is preempted with 10 s done and FIFO resumes it on node 1 at once (free actions):
    # it ends at 10 + 90 = 100 (JCT 100); without the failure it would also end at 100, so the
    # preemption count shows the failure was handled.
    r = records(make("fifo"), [rigid("A", 0, 100, 2, declared=True)], Cluster.uniform(2, 2),
                failures=[NodeFailure(0, 10.0, 50.0)])
    assert r["A"].jct_s == pytest.approx(100.0) and r["A"].preemptions == 1
    # With a 30 s resume cost it ends 30 s later.
    r = records(make("fifo"), [rigid("A", 0, 100, 2, declared=True)], Cluster.uniform(2, 2),
                costs=CostModel(resume_s=30.0), failures=[NodeFailure(0, 10.0, 50.0)])
    assert r["A"].jct_s == pytest.approx(130.0)


def test_tiresias_keeps_queue_history_across_an_index_rebuild_but_not_a_new_history():
    """``ClusterView.stream`` changing means "rebuild your index"; only ``history`` changing
    means the jobs' past is another one (the live cache resyncs; a new run starts)."""
    from stint.model import Allocation
    from stint.policies.base import ClusterView, JobStatus, Phase

    pol = make("tiresias", thresholds_gpu_s=(10.0,))
    a = JobStatus(rigid("A", 0, 100, 1, declared=True), Phase.RUNNING, Allocation.of({0: 1}), attained_gpu_s=2.0,
                  first_start_s=0.0)

    def view(now, stream, history):
        return ClusterView(now, Cluster.uniform(1, 4), [a], [3], ScalingModel(), ("A",),
                           by_id={"A": a}, stream=stream, history=history)

    pol.plan(view(5.0, 1, 7))
    assert pol._entered["A"] == (0, 0.0)  # Q0 since its arrival
    a.attained_gpu_s = 20.0
    pol.plan(view(30.0, 2, 7))  # the index is rebuilt, the history kept: demoted to Q1 at 30
    assert pol._entered["A"] == (1, 30.0)
    pol.plan(view(30.0, 2, 8))  # another history: A is filed as if seen for the first time
    assert pol._entered["A"] == (1, 0.0)


def test_policies_say_why_each_waiting_job_waits_when_asked():
    """``ClusterView.explain``: a job too big for the free GPUs, the jobs behind it (FIFO's head
    of line), a job preempted for another (SRTF); nothing when not asked (simulation)."""
    from stint.model import Allocation
    from stint.model.allocation import WaitCode
    from stint.policies.base import ClusterView, JobStatus, Phase

    running = JobStatus(rigid("R", 0, 100, 2, declared=True), Phase.RUNNING, Allocation.of({0: 2}), first_start_s=0.0)
    big, small = JobStatus(rigid("B", 1, 10, 4, declared=True)), JobStatus(rigid("S", 2, 5, 1, declared=True))
    jobs = [running, big, small]

    def view(explain: bool) -> ClusterView:
        return ClusterView(3.0, Cluster.uniform(1, 4), jobs, [2], ScalingModel(),
                           tuple(j.job_id for j in jobs), explain=explain)

    plan = make("fifo").plan(view(True))
    assert plan.allocations == {}
    assert str(plan.waiting["B"]) == "capacity: needs 4 GPUs, 2 free"
    assert plan.waiting["S"].code is WaitCode.BEHIND and "behind job B (fifo" in str(plan.waiting["S"])
    assert make("fifo").plan(view(False)).waiting == {}
    plan = make("srtf").plan(view(True))  # S (5 s) preempts nothing: 2 GPUs are free; B waits
    assert "S" in plan.allocations and plan.waiting["B"].code is WaitCode.CAPACITY
    short = JobStatus(rigid("X", 2, 1, 4, declared=True))
    jobs[1:] = [short]
    plan = make("srtf").plan(view(True))  # X (1 s, 4 GPUs) preempts R (97 s left)
    assert plan.allocations["R"] == Allocation() and str(plan.waiting["R"]) == "preempted: preempted for job X (srtf)"


def test_tiresias_demotion_timer_is_in_the_future_a_rounding_error_from_the_threshold():
    """A running job whose attained service is one rounding error short of a threshold: its
    demotion is due in less than half a unit in the last place of ``now``, which rounds to
    ``now``; a timer due now fires at once, leaves the job in its queue and is armed again at
    now, forever (the fleet at load 1.2 hung so). It must be due after ``now``."""
    import math

    from stint.model import Allocation
    from stint.policies.base import JobStatus, Phase

    pol = make("tiresias")  # one threshold, 16 GPU-hours = 57,600 GPU-s
    now, attained = 50400.0, math.nextafter(57600.0, 0.0)
    assert now + (57600.0 - attained) / 2 == now  # the rounding this test is about
    a = JobStatus(rigid("A", 0, 1e5, 2, declared=True), Phase.RUNNING, Allocation.of({0: 2}), attained_gpu_s=attained,
                  first_start_s=0.0)
    pol._arm_timer(a, now, pol.queue_of(a, now))
    due = pol.next_due()
    assert due is not None and due > now
