"""A job moved to another cluster enters it with its history, as the live fleet's job is one
store row wherever it runs: its original arrival, attained service, first start, preemptions.

Each scenario: clusters a and b in one region (one node of 8 GPUs each), ``static`` placement
(a job on its data cluster; when that is down, on the other), cluster a down from ``down_s`` on,
so its running job M rolls back to its last checkpoint (every 1800 s of running) and resumes on
b after copying 10 GB at 40 Gbit/s (2 s). The scaling model runs a job at 1 work unit/s on its
requested 8 GPUs, so work is seconds.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from builders import fleet, fleet_job  # type: ignore[import-not-found]

from stint.model.allocation import Plan
from stint.model.fleet import FleetFailure, FleetJob
from stint.model.job import Tier
from stint.perf.scaling import ScalingModel
from stint.policies.base import ClusterView, Policy
from stint.policies.fifo import Fifo
from stint.policies.fleet.registry import make_global
from stint.policies.registry import make
from stint.sim.fleet import FleetResult, FleetSimulator


def _run(jobs: list[FleetJob], down_s: float, make_policy: Callable[[], Policy]) -> FleetResult:
    fl = fleet(("a", "r0", 1), ("b", "r0", 1), failures=(FleetFailure("cluster", "a", down_s, 1e7),))
    return FleetSimulator(fl, jobs, make_global("static"), make_policy, ScalingModel()).run()


def _finish(res: FleetResult) -> dict[str, float]:
    return {r.job_id: r.finish_s for r in res.records}


def test_under_tiresias_a_moved_job_keeps_its_attained_service_and_does_not_jump_the_queue() -> None:
    # M runs on a from 0; at 8000 a fails: M has attained 8 x 8000 = 64,000 GPU-s, past
    # Tiresias' threshold of 57,600 (queue Q1); it rolls back to its checkpoint at 7200 (12,800 s
    # left) and enters b at 8002. On b, F (Q0) runs 7000-12000; G arrives at 9000 (Q0).
    # At 12000 G, in Q0, goes before M, in Q1: G 12000-13000, then M resumes (30 s): 13030 +
    # 12800 = 25830. (Entering as a new job, M was in Q0 from 8002, ahead of G: M 12000-19200,
    # demoted, then G 19200-20200.)
    jobs = [fleet_job("M", 0.0, 20000.0, data=0), fleet_job("F", 7000.0, 5000.0, data=1),
            fleet_job("G", 9000.0, 1000.0, data=1)]
    res = _run(jobs, 8000.0, lambda: make("tiresias"))
    done = _finish(res)
    assert done["G"] == pytest.approx(13000.0)
    assert done["M"] == pytest.approx(25830.0)
    m = next(r for r in res.clusters[1].records if r.job_id == "M")  # b's own record of M
    assert (m.arrival_s, m.first_start_s, m.work_received) == (0.0, 0.0, pytest.approx(20000.0))
    assert m.attained_gpu_s == pytest.approx(8 * (8000.0 + 30.0 + 12800.0))  # the lost 800 s, the restart


def test_singularity_serves_a_moved_basic_job_by_its_original_arrival() -> None:
    # M (basic, 20,000 s) runs on a from 0; a fails at 8500: back to its checkpoint at 7200, it
    # enters b at 8502 with 12,800 s left. F runs on b 0-10000; G (basic, 3,700 s) arrives at
    # 9500. At 10000 both wait; basic jobs go lowest projected attainment first (response
    # ratio; ideal / (finish after a 30 s restart - arrival - 60 s allowance)): M's is
    # 20000 / (10030 + 12800 - 0 - 60) = 0.878, G's 3700 / (10030 + 3700 - 9500 - 60) = 0.887,
    # so M first: M resumes (30 s), 10030-22830, then G 22830-26530. (Arrived at 8502 with
    # 12,800 s of work, M's was 12800 / (10030 + 12800 - 8502 - 60) = 0.897: G would go first.)
    basic = Tier.BASIC
    jobs = [fleet_job("M", 0.0, 20000.0, data=0, tier=basic), fleet_job("F", 0.0, 10000.0, data=1, tier=basic),
            fleet_job("G", 9500.0, 3700.0, data=1, tier=basic)]
    done = _finish(_run(jobs, 8500.0, lambda: make("singularity")))
    assert done["M"] == pytest.approx(22830.0)
    assert done["G"] == pytest.approx(26530.0)


class _Seen(Fifo):
    """FIFO that records, at each pass, the ids of ``view.jobs`` in order and M's status."""

    def __init__(self, log: list[tuple[float, list[str], tuple[float, float, float | None, int] | None]]) -> None:
        super().__init__()
        self.log = log

    def plan(self, view: ClusterView) -> Plan:
        st = view.by_id.get("M") if view.by_id is not None else None
        m = None if st is None else (st.spec.arrival_s, st.attained_gpu_s_at(view.now), st.first_start_s,
                                     st.preemptions)
        self.log.append((view.now, [s.job_id for s in view.jobs], m))
        return super().plan(view)


def test_every_policy_sees_the_moved_job_as_the_live_store_shows_it() -> None:
    # M runs on a 0-1500 (no checkpoint yet: it loses all 1500 s, keeps its 12,000 GPU-s of
    # service and its first start) and enters b at 1500 (nothing to copy); b holds F (arrived
    # 1000) and H (1200): the policy sees M first, at its arrival 0.
    logs: list[list[tuple[float, list[str], tuple[float, float, float | None, int] | None]]] = []

    def spy() -> Policy:
        logs.append([])
        return _Seen(logs[-1])

    jobs = [fleet_job("M", 0.0, 20000.0, data=0), fleet_job("F", 1000.0, 9000.0, data=1),
            fleet_job("H", 1200.0, 100.0, data=1)]
    _run(jobs, 1500.0, spy)
    at_b = next((now, ids, m) for now, ids, m in logs[1] if m is not None)
    assert at_b == (1500.0, ["M", "F", "H"], (0.0, 8 * 1500.0, 0.0, 0))
