from dataclasses import fields
from itertools import pairwise

import pytest

from stint.model import EMPTY, Allocation, Cluster, JobSpec, Plan, Resources, SigmoidUtility
from stint.policies import available, make
from stint.policies.registry import UnknownPolicyError
from stint.reconcile import ActionKind, classify, reconcile


def test_resources_fit_and_copies():
    cap = Resources(gpu=4, cpu=32, mem_gb=256)
    demand = Resources(gpu=1, cpu=10, mem_gb=8)
    # cpu is the binding resource: 32 // 10 = 3 copies
    assert demand.max_copies_in(cap) == 3
    assert demand.scaled(3).fits_in(cap)
    assert not demand.scaled(4).fits_in(cap)


def test_jobspec_rejects_inconsistent_worker_bounds():
    with pytest.raises(ValueError, match="min_workers"):
        JobSpec("j", 0.0, 10.0, requested_workers=2, min_workers=3, max_workers=4)
    with pytest.raises(ValueError, match="work must be positive"):
        JobSpec("j", 0.0, 0.0)


def test_cluster_uniform_and_lookup():
    c = Cluster.uniform(3, 4)
    assert c.total_gpus == 12
    assert c.index_of("node-2") == 2
    with pytest.raises(KeyError, match="node-9"):
        c.index_of("node-9")
    with pytest.raises(ValueError):
        Cluster.uniform(0, 4)


def test_sigmoid_utility_is_half_at_target_and_non_increasing():
    f = SigmoidUtility(gamma1=10, gamma2=1.0, gamma3=5, slot_s=60)
    assert f(5 * 60) == pytest.approx(5.0)
    values = [f(t) for t in range(0, 3600, 60)]
    assert all(a >= b for a, b in pairwise(values))
    assert f(1e9) == 0.0  # no overflow far past the target


def test_allocation_of_drops_zero_counts_and_sorts():
    a = Allocation.of({3: 2, 1: 1, 2: 0})
    assert a.workers == ((1, 1), (3, 2))
    assert a.num_workers == 3 and a.num_nodes == 2
    assert not EMPTY


@pytest.mark.parametrize(
    "before, after, has_run, expected",
    [
        (EMPTY, Allocation.of({0: 2}), False, ActionKind.START),
        (EMPTY, Allocation.of({0: 2}), True, ActionKind.RESUME),
        (Allocation.of({0: 2}), EMPTY, True, ActionKind.PREEMPT),
        (Allocation.of({0: 2}), Allocation.of({0: 4}), True, ActionKind.RESIZE),
        (Allocation.of({0: 2}), Allocation.of({1: 2}), True, ActionKind.MIGRATE),
        (Allocation.of({0: 2}), Allocation.of({0: 2}), True, None),
    ],
)
def test_classify(before, after, has_run, expected):
    assert classify(before, after, has_run) is expected


def test_reconcile_orders_preemptions_before_starts():
    current = {"a": Allocation.of({0: 4}), "b": EMPTY, "c": Allocation.of({1: 4})}
    plan = Plan(
        allocations={"b": Allocation.of({0: 4}), "a": EMPTY, "c": Allocation.of({1: 2})},
        reject={},
    )
    actions = reconcile(plan, current, {"a": True, "b": False, "c": True})
    assert [(x.kind, x.job_id) for x in actions] == [
        (ActionKind.PREEMPT, "a"),
        (ActionKind.RESIZE, "c"),
        (ActionKind.START, "b"),
    ]


def test_unknown_policy_lists_valid_ones():
    with pytest.raises(UnknownPolicyError) as err:
        make("no-such-policy")
    # The baselines register themselves on import; an empty registry would make the loop vacuous.
    assert {"fifo", "drf", "tiresias", "oasis"} <= set(available())
    for name in available():
        assert name in str(err.value)


def test_eq6_sizes_parameter_servers_once_for_every_policy():
    """(6) b·y <= B·z with (7) z <= y: ceil(y b / B); a worker that uses no bandwidth needs no
    PS (DRF had its own copy that said y)."""
    from stint.model import Resources
    from stint.perf.ps_model import ps_needed
    from stint.policies import drf

    def spec(b: float, big_b: float) -> JobSpec:
        return JobSpec("p", 0.0, 1.0, 4, 1, 4, worker_demand=Resources(gpu=1, net_gbps=b),
                       ps_demand=Resources(cpu=1, net_gbps=big_b))

    assert ps_needed(spec(1.0, 4.0), 4) == 1 and ps_needed(spec(3.0, 4.0), 4) == 3
    assert ps_needed(spec(0.0, 4.0), 4) == 0
    assert drf.demand(spec(0.0, 4.0), 4)[1] == 0.0  # DRF charges no PS CPU either
    assert ps_needed(JobSpec("a", 0.0, 1.0), 3) == 0


def test_live_status_counts_the_sdks_steps_against_the_declared_total():
    """A running job that declared its steps progresses by the SDK's report; its attained
    service and work are as of the time the report is read, and grow lazily from there."""
    from stint.perf.scaling import ScalingModel
    from stint.runtime.tables import Job
    from stint.runtime.view import status_of

    job = Job(id=7, user_id=1, name="j", command="[]", gpus=2, min_gpus=1, max_gpus=2,
              tier="standard", priority=1.0, deadline_s=None, submitted_at=1000.0, state="running",
              reason="", attempt=1, allocation="[[0, 2]]", slots="{}", target=None,
              stop_purpose=None, failures=0, preemptions=0, exit_code=None, first_start_at=1010.0,
              last_change_at=1010.0, finished_at=None, attained_gpu_s=6.0, holding_since=1010.0,
              est_s=100.0, total_steps=50, logical_ranks=None, work_done=3.0, decision=None)
    st = status_of(job, "alice", 1000.0, ScalingModel(), {"step": 10}, now=30.0)
    assert st.spec.arrival_s == 0.0 and st.first_start_s == 10.0  # the store's clock
    assert st.work_done == 20.0  # 10 of 50 steps of 100 s
    assert st.attained_gpu_s == 6.0 + 2 * 20.0 and st.as_of_s == 30.0
    assert st.work_done_at(35.0) == 25.0 and st.attained_gpu_s_at(35.0) == 56.0
    plain = status_of(job, "alice", 1000.0, ScalingModel(), None, now=30.0)
    assert plain.work_done == 3.0 and plain.as_of_s == 10.0 and plain.work_done_at(30.0) == 23.0


def test_cluster_totals_are_its_nodes_summed_and_part_of_the_value() -> None:
    from stint.model.cluster import Node

    c = Cluster((Node("a", Resources(gpu=4, cpu=32, mem_gb=256, net_gbps=100)),
                 Node("b", Resources(gpu=2, cpu=8, mem_gb=64, net_gbps=25))))
    assert c.total == Resources(gpu=6, cpu=40, mem_gb=320, net_gbps=125)
    assert c.total_gpus == 6
    assert {"total", "total_gpus"} <= {f.name for f in fields(Cluster)}  # computed once
