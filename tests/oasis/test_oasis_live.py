"""OASiS as a live cluster runs it: restarts priced into the plan, arrivals planned into the slot
under way, admitted jobs planned earlier when capacity frees, overruns re-planned at once, and
rejections that name their cause."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from stint.model import Cluster, JobSpec, Node, Resources
from stint.model.allocation import Allocation
from stint.model.utility import DeadlineUtility
from stint.policies.base import ClusterView, JobStatus, Phase
from stint.policies.oasis import DEFAULT_RESTART_S, DEFAULT_START_S, OASiS
from stint.policies.oasis_core import DPJob, HostPrices
from stint.policies.oasis_restart import NEAR, RestartCosts, best_schedule_with_costs
from stint.sim.costs import CostModel


class _Rate:
    def rate(self, spec: JobSpec, alloc: Allocation) -> float:
        return alloc.num_workers / spec.requested_workers


def _two_by_two() -> Cluster:
    return Cluster(tuple(Node(f"n{i}", Resources(gpu=2)) for i in range(2)))


def _live_job(i: int, work: float = 600.0, **kw: object) -> JobSpec:
    return JobSpec(f"j{i}", 0.0, work, 2, 1, 2, worker_counts=(1, 2), **kw)  # type: ignore[arg-type]


def _view(now: float, jobs: list[JobStatus], explain: bool = False) -> ClusterView:
    return ClusterView(now, _two_by_two(), jobs, [2, 2], _Rate(), explain=explain)


def test_default_costs_are_the_simulators() -> None:
    assert DEFAULT_RESTART_S == CostModel().resize_s == CostModel().resume_s
    assert DEFAULT_START_S == CostModel().start_s


def test_five_jobs_without_a_length_on_an_idle_cluster_are_all_decided() -> None:
    pol = OASiS(slot_s=5)
    jobs = [JobStatus(_live_job(i)) for i in range(5)]
    plan = pol.plan(_view(0.3, jobs))
    running = [j for j, a in plan.allocations.items() if a]
    assert len(running) == 2  # both hosts busy at once, mid-slot: no wait for the boundary
    decided = set(plan.allocations) | set(plan.reject) | set(pol.committed)
    assert decided == {f"j{i}" for i in range(5)}  # none left queued undecided
    for reason in plan.reject.values():
        assert reason.startswith("oasis: not admitted") and "--" in reason


def test_a_job_admitted_for_later_starts_when_capacity_frees() -> None:
    pol = OASiS(slot_s=5)
    jobs = [JobStatus(_live_job(i)) for i in range(4)]
    plan = pol.plan(_view(0.3, jobs))
    later = [j for j in ("j2", "j3") if j in pol.committed and j not in plan.allocations]
    assert later  # the hosts are booked by j0 and j1 for their assumed length
    # j0 and j1 end early (their 600 s was an assumption): the others are planned from now
    left = [st for st in jobs if st.job_id in later]
    plan = pol.plan(_view(12.0, left))
    assert all(plan.allocations[j].num_workers == 2 for j in later)
    assert all(pol.committed[j][1].start_slot == 2 for j in later)


def test_restart_of_a_slot_or_more_keeps_one_count_on_the_same_hosts() -> None:
    pol = OASiS(slot_s=5, restart_s=30)
    jobs = [JobStatus(_live_job(i, work=100.0)) for i in range(3)]
    pol.plan(_view(0.0, jobs))
    assert pol.committed
    for _, s in pol.committed.values():
        ran = [i for i, w in enumerate(s.workers) if w.any()]
        assert ran == list(range(ran[0], ran[-1] + 1))  # no pause: a resume is a restart
        assert all(np.array_equal(s.workers[i], s.workers[ran[0]]) for i in ran)


def _delivered(ys: list[int], q: float, rc: RestartCosts) -> float:
    """Work units a count sequence delivers under the restart costs."""
    units, prev, started = 0.0, rc.workers_now, rc.workers_now > 0
    for j, y in enumerate(ys):
        frac = rc.first_frac if j == 0 else 1.0
        if y:
            loss = 0.0 if (started and y == prev) else rc.restart if started else rc.start
            units += np.floor(y * max(0.0, frac - loss) / q + 1e-9)
            started = True
        prev = y
    return units


def _brute(job: DPJob, wh: HostPrices, n: int, rc: RestartCosts) -> float:
    """The best payoff over every count sequence (one host: placement is forced)."""
    best = -np.inf
    for ys in itertools.product([0, *job.counts], repeat=n):
        last = max((j for j, y in enumerate(ys) if y), default=-1)
        if last < 0 or _delivered(list(ys[:last + 1]), job.quantum_ws, rc) < job.quanta:
            continue
        done = next(j for j in range(n) if _delivered(list(ys[:j + 1]), job.quantum_ws, rc)
                    >= job.quanta)
        if done != last:
            continue
        cost = sum((rc.first_frac if j == 0 else 1.0) * y * float(wh.price[job.arrival_slot + j, 0]
                                                                    @ job.worker_demand)
                   for j, y in enumerate(ys[:last + 1]))
        best = max(best, float(job.utility[last]) - cost)
    return best


@pytest.mark.parametrize("restart,start,frac", [(0.5, 0.0, 1.0), (0.25, 0.25, 0.5), (0.0, 0.0, 0.4)])
def test_restart_priced_dp_matches_brute_force(restart: float, start: float, frac: float) -> None:
    rng = np.random.default_rng(7)
    for _ in range(6):
        wh = HostPrices(np.array([[2.0, 1.0, 1.0, 1.0]]), 0.01, np.full(4, 3.0), 8)
        for t in range(5):  # some slots already booked (higher prices)
            wh.add(t, np.array([int(rng.integers(0, 2))]), np.array([1.0, 0, 0, 0]))
        utility = np.sort(rng.uniform(0.5, 3.0, 5))[::-1]
        job = DPJob(0, 2, int(rng.integers(2, 6)), 1.0, None, np.array([0.5, 0, 0, 0]), None,
                    utility, (1, 2))
        rc = RestartCosts(restart, start, frac)
        sched = best_schedule_with_costs(job, wh, None, 5, rc)
        want = _brute(job, wh, 5, rc)
        if sched is None:
            assert want == -np.inf
            continue
        ys = [int(w.sum()) for w in sched.workers]
        assert _delivered(ys, job.quantum_ws, rc) >= job.quanta  # its restarts are paid for
        # exact up to the DP's stopping rule: no later completion better by more than NEAR
        assert want - NEAR * float(utility.max()) - 1e-9 <= sched.payoff <= want + 1e-9


def test_an_overrunning_job_is_replanned_at_once_on_its_workers() -> None:
    pol = OASiS(slot_s=5)
    st = JobStatus(_live_job(0, work=20.0))
    plan = pol.plan(_view(0.0, [st]))
    alloc = plan.allocations["j0"]
    last = pol.committed["j0"][1].last_slot
    # it is still running after its schedule ended (its length was an estimate)
    st = replace(st, phase=Phase.RUNNING, allocation=alloc, work_done=20.0)
    plan = pol.plan(_view((last + 1) * 5.0, [st]))
    assert "j0" not in plan.reject
    assert "j0" not in plan.allocations  # it keeps its workers: no restart, no idle slot
    assert pol.committed["j0"][1].start_slot == last + 1
    assert "re-admitted" in plan.explain["j0"]


def test_rejections_name_the_input_that_decided_them() -> None:
    pol = OASiS(slot_s=5, horizon_slots=20)
    long = _live_job(0, work=1000.0)  # 200 slots at 2 workers: beyond a 20-slot horizon
    late = _live_job(1, work=100.0, utility=DeadlineUtility(1.0, 10.0))  # 50 s, due in 10 s
    plan = pol.plan(_view(0.0, [JobStatus(long), JobStatus(late)]))
    assert "horizon_slots" in plan.reject["j0"] and "--est-s" in plan.reject["j0"]
    assert "--deadline" in plan.reject["j1"]
    pol = OASiS(slot_s=5, horizon_slots=30)
    jobs = [JobStatus(_live_job(i, work=50.0)) for i in range(7)]  # 3 waves of 10 slots fit
    plan = pol.plan(_view(0.0, jobs))
    assert plan.reject and all("submit it later" in r for r in plan.reject.values())


def test_describe_groups_slots_of_equal_counts() -> None:
    pol = OASiS(slot_s=5)
    pol.plan(_view(0.0, [JobStatus(_live_job(0, work=50.0))]))
    text = pol.describe("j0", "admitted")
    assert text.endswith("workers per slot: slots 0-9: 2")


def test_an_overrunning_job_keeps_its_hosts_and_a_job_not_started_moves_after_it() -> None:
    one = Cluster((Node("n0", Resources(gpu=2)),))
    pol = OASiS(slot_s=5)
    first, second = JobStatus(_live_job(0, work=20.0)), JobStatus(_live_job(1, work=20.0))
    plan = pol.plan(ClusterView(0.0, one, [first, second], [2], _Rate()))
    last = pol.committed["j0"][1].last_slot
    assert pol.committed["j1"][1].workers[: last + 1].sum() == 0  # booked after j0
    running = replace(first, phase=Phase.RUNNING, allocation=plan.allocations["j0"],
                      work_done=20.0)
    plan = pol.plan(ClusterView((last + 1) * 5.0, one, [running, second], [0], _Rate()))
    assert "j0" not in plan.allocations and "j0" not in plan.reject  # not stopped
    assert "j1" in pol.committed and "j1" not in plan.reject  # still admitted, planned later
    j1 = pol.committed["j1"][1]
    assert j1.start_slot + int(np.flatnonzero(j1.workers.sum(axis=1))[0]) > \
        pol.committed["j0"][1].last_slot
    assert "ran past its estimate" in plan.explain["j1"]
