"""The parity proof: every registered policy, the same trace, the same actions live and simulated.

The trace has rigid and elastic jobs (elastic ones run only on divisors of their logical ranks),
an arrival burst that queues, jobs that finish while others wait, parameter-server jobs (one
whose PS count may change, one rigid), a node that fails and comes back, and slot policies (OASiS
with slots of 10 s). The cluster has two GPU nodes of role "worker" and a CPU-only PS node with
room for two PSs. Each policy runs through the simulator and through the real ``Controller`` on a
real store; the ordered actions (time, kind, job, workers after, PSs after, with their nodes)
must be the same. The policies that place PSs (``PS_POLICIES``) must place some; the others run
the PS jobs on their workers alone (the job's own worker 0 starts its servers), the same way on
both sides.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from parity_helpers import TraceJob, run_live, simulate  # type: ignore[import-not-found]

from stint.policies import available
from stint.runtime.store import Store
from stint.sim.engine import NodeFailure

TRACE = [
    TraceJob(0.0, 100.0, 2, 2, 2),
    TraceJob(0.0, 60.0, 1, 1, 1),
    TraceJob(5.0, 80.0, 2, 1, 4),  # elastic: 1, 2 or 4 workers (divisors of 4)
    TraceJob(5.0, 40.0, 4, 4, 4),  # a burst that queues
    TraceJob(5.0, 30.0, 1, 1, 1),
    TraceJob(10.0, 60.0, 2, 1, 2, ps=2, min_ps=1, max_ps=2),  # parameter servers: 1 or 2
    TraceJob(20.0, 50.0, 2, 1, 2),
    TraceJob(30.0, 40.0, 1, 1, 1, ps=1),
    TraceJob(90.0, 20.0, 1, 1, 1),
]
FAILURES = [NodeFailure(node=1, down_s=45.0, up_s=75.0),  # its jobs stop; it holds nothing
            NodeFailure(node=2, down_s=280.0, up_s=290.0)]  # the PS node: its PSs' jobs stop
NODES, GPUS, PS_NODES = 2, 2, 1
PS_POLICIES = {"oasis", "oasis-replan", "rrh", "dorm", "drf", "drf-ps", "fifo-fixed"}
# Parameters sized for a 4-GPU cluster and a trace of minutes (the same in both runs; OASiS's
# horizon of 400 s holds every job of the trace, which ends before 350 s).
OPTIONS = {
    "oasis": ["slot_s=10", "horizon_slots=40"],
    "oasis-replan": ["slot_s=10", "horizon_slots=40"],
    "rrh": ["slot_s=10", "threshold=0"],
    "tiresias": ["thresholds_gpu_s=60", "tick_s=10"],
    "optimus": ["tick_s=10"],
}


@pytest.mark.slow
@pytest.mark.parametrize("policy", available())
def test_live_controller_enacts_what_the_simulator_does(policy: str, store: Store,
                                                        tmp_path: Path) -> None:
    opts = OPTIONS.get(policy, [])
    sim, sim_ended = simulate(TRACE, policy, opts, NODES, GPUS, FAILURES, PS_NODES)
    live, live_ended = run_live(TRACE, policy, opts, NODES, GPUS, store, tmp_path / "jobs",
                                FAILURES, PS_NODES)
    assert sim, f"{policy} did nothing in simulation"
    assert any(ps for *_, ps in sim) == (policy in PS_POLICIES)  # the trace exercises PS placement
    assert live == sim
    assert live_ended == sim_ended
    from stint.runtime.store import Caller

    rows = store.list_jobs(Caller(0, "admin", True))  # the forecasts (which changed nothing) ran
    assert any(r.est_start_at is not None for r in rows)
