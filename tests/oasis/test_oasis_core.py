"""OASiS numerical core: prices (eq. 22), COST_t (Thm 1) and the DP of Alg. 2 against brute force."""

import itertools
import math

import numpy as np
import pytest

from stint.policies.oasis_core import (
    DPJob,
    HostPrices,
    Schedule,
    best_schedule,
    commit,
    fill_costs,
)

L, U = 0.5, np.array([8.0, 2.0])


def hosts(caps, slots=4, low=L, high=U):
    return HostPrices(np.array(caps, dtype=float), low, high, slots)


def test_price_is_L_at_zero_load_and_U_at_capacity():
    hp = hosts([[4.0, 10.0], [2.0, 5.0]])
    assert np.allclose(hp.price, L)
    hp.add(1, np.array([1, 1]), np.array([2.0, 5.0]))  # host 1 full in slot 1; host 0 half full
    assert np.allclose(hp.price[1, 1], U)
    # half load: L (U/L)^(1/2)
    assert np.allclose(hp.price[1, 0], L * np.sqrt(U / L))
    assert np.allclose(hp.price[0], L) and np.allclose(hp.price[2:], L)  # untouched slots


def test_release_restores_prices():
    hp = hosts([[4.0, 10.0]])
    hp.add(0, np.array([2]), np.array([1.0, 1.0]))
    hp.add(0, np.array([-2]), np.array([1.0, 1.0]))
    assert np.allclose(hp.price, L)


def test_fill_costs_is_cheapest_first_with_capacity():
    unit = np.array([[3.0, 1.0, 2.0]])
    room = np.array([[1, 2, 1]])
    # cheapest host 1 takes 2 (cost 1 each), then host 2 (2), then host 0 (3); a 5th doesn't fit
    assert fill_costs(unit, room, 5).tolist() == [[0.0, 1.0, 2.0, 4.0, 7.0, math.inf]]


def _brute_slot_cost(unit, room, count):
    best = math.inf
    for ys in itertools.product(*(range(r + 1) for r in room)):
        if sum(ys) == count:
            best = min(best, float(np.dot(unit, ys)))
    return best


def _brute_best(job, wh, ph, end):
    """Every split of the job's units over slots, every placement per slot: the max payoff."""
    a, D = job.arrival_slot, job.quanta
    best_mu, best_t = 0.0, None
    for last in range(a, end):
        n = last - a + 1
        for split in itertools.product(range(D + 1), repeat=n):
            if sum(split) != D:
                continue
            cost = 0.0
            for j, d in enumerate(split):
                y = int(job.workers_for(np.array([d]))[0])
                if y > job.max_workers:
                    cost = math.inf
                    break
                t = a + j
                room = np.minimum(wh.room(t, t + 1, job.worker_demand)[0], job.max_workers)
                cost += _brute_slot_cost(wh.unit_price(t, t + 1, job.worker_demand)[0], room, y)
                z = int(job.ps_for(np.array([y]))[0])
                cost += _brute_slot_cost(ph.unit_price(t, t + 1, job.ps_demand)[0],
                                         ph.room(t, t + 1, job.ps_demand)[0], z)
            mu = job.utility[last - a] - cost
            if mu > best_mu + 1e-9:
                best_mu, best_t = mu, last
    return best_mu, best_t


def _random_instance(rng):
    wh = HostPrices(rng.uniform(1, 3, (3, 2)), 0.2, np.array([5.0, 3.0]), 5)
    ph = HostPrices(rng.uniform(1, 3, (2, 2)), 0.1, np.array([2.0, 4.0]), 5)
    for t in range(5):  # earlier commitments make prices differ by host and slot
        wh.add(t, rng.integers(0, 2, 3), rng.uniform(0, 0.8, 2))
        ph.add(t, rng.integers(0, 2, 2), rng.uniform(0, 0.8, 2))
    a = int(rng.integers(0, 2))
    job = DPJob(arrival_slot=a, max_workers=int(rng.integers(2, 5)), quanta=int(rng.integers(1, 5)),
                quantum_ws=float(rng.choice([0.5, 1.0, 1.5])), ps_ratio=float(rng.uniform(0.2, 1)),
                worker_demand=rng.uniform(0.2, 0.9, 2), ps_demand=rng.uniform(0.1, 0.6, 2),
                utility=np.sort(rng.uniform(0, 12, 5 - a))[::-1].copy())
    return job, wh, ph


@pytest.mark.parametrize("seed", range(40))
def test_dp_equals_brute_force_on_tiny_instances(seed):
    job, wh, ph = _random_instance(np.random.default_rng(seed))
    mu, last = _brute_best(job, wh, ph, 5)
    sched = best_schedule(job, wh, ph, 5)
    if last is None:
        assert sched is None
        return
    assert sched is not None
    assert sched.payoff == pytest.approx(mu, abs=1e-9)
    assert sched.last_slot == last  # ties go to the earlier completion slot


def test_schedule_respects_capacity_and_worker_limit():
    rng = np.random.default_rng(7)
    wh = HostPrices(rng.uniform(2, 4, (4, 2)), 0.01, np.array([50.0, 50.0]), 6)
    ph = HostPrices(rng.uniform(2, 4, (3, 2)), 0.01, np.array([50.0, 50.0]), 6)
    admitted = 0
    for i in range(30):
        job = DPJob(0, 3, 6, 1.0, 0.5, rng.uniform(0.3, 1.0, 2), rng.uniform(0.2, 0.8, 2),
                    np.full(6, 100.0))
        s = best_schedule(job, wh, ph, 6)
        if s is None:
            continue
        admitted += 1
        assert (s.workers.sum(axis=1) <= job.max_workers).all()  # constraint (3)
        assert s.workers.sum() >= job.quanta * job.quantum_ws  # constraint (2)
        y, z = s.workers.sum(axis=1), s.ps.sum(axis=1)
        assert (0.5 * y <= z + 1e-9).all() and (z <= y).all()  # (6) and (7)
        commit(job, s, wh, ph)
        assert (wh.load <= wh.cap[None] + 1e-9).all() and (ph.load <= ph.cap[None] + 1e-9).all()
    assert 0 < admitted < 30  # the cluster filled up and later jobs were turned away


def test_admission_rejects_non_positive_payoff():
    wh, ph = hosts([[4.0, 4.0]]), hosts([[4.0, 4.0]])
    job = DPJob(0, 2, 2, 1.0, 0.5, np.array([1.0, 1.0]), np.array([1.0, 1.0]), np.zeros(4))
    assert best_schedule(job, wh, ph, 4) is None  # utility 0: payoff is minus the cost
    # cost at zero load: 2 worker-slots x L x 2 resources + 1 PS-slot x L x 2 = 3.0 (at best)
    cheap = DPJob(0, 2, 2, 1.0, 0.5, job.worker_demand, job.ps_demand, np.full(4, 3.0))
    assert best_schedule(cheap, wh, ph, 4) is None  # μ = 0 is not > 0
    rich = DPJob(0, 2, 2, 1.0, 0.5, job.worker_demand, job.ps_demand, np.full(4, 3.5))
    s = best_schedule(rich, wh, ph, 4)
    assert isinstance(s, Schedule) and s.payoff == pytest.approx(0.5)


def test_job_that_cannot_fit_is_rejected():
    wh = hosts([[1.0, 1.0]])
    big = DPJob(0, 2, 1, 1.0, None, np.array([2.0, 0.5]), None, np.full(4, 100.0))
    assert best_schedule(big, wh, None, 4) is None


def test_a_jobs_ps_bounds_hold_the_ps_count_for_every_worker_count() -> None:
    from stint.policies.oasis_core import DPJob

    free = DPJob(0, 4, 4, 1.0, 0.5, np.ones(4), np.ones(4), np.ones(4), (1, 2, 3, 4))
    bounded = DPJob(0, 4, 4, 1.0, 0.5, np.ones(4), np.ones(4), np.ones(4), (1, 2, 3, 4), 2, 2)
    y = np.arange(5)
    assert free.ps_for(y).tolist() == [0, 1, 1, 2, 2]  # ceil(y b/B), at most y
    assert bounded.ps_for(y).tolist() == [0, 2, 2, 2, 2]  # none without workers
