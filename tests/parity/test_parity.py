"""The parity proof: every registered policy, the same trace, the same actions live and simulated.

The trace has rigid and elastic jobs (elastic ones run only on divisors of their logical ranks),
an arrival burst that queues, jobs that finish while others wait, a node that fails and comes
back, and slot policies (OASiS with slots of 10 s). Each policy runs through the simulator and
through the real ``Controller`` on a real store; the ordered actions (time, kind, job, workers after) must be the same.
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
    TraceJob(20.0, 50.0, 2, 1, 2),
    TraceJob(90.0, 20.0, 1, 1, 1),
]
FAILURES = [NodeFailure(node=1, down_s=45.0, up_s=75.0)]  # its jobs stop; it holds nothing
NODES, GPUS = 2, 2
# Parameters sized for a 4-GPU cluster and a trace of minutes (the same in both runs).
OPTIONS = {
    "oasis": ["slot_s=10", "horizon_slots=60"],
    "oasis-replan": ["slot_s=10", "horizon_slots=60"],
    "rrh": ["slot_s=10", "threshold=0"],
    "tiresias": ["thresholds_gpu_s=60", "tick_s=10"],
    "optimus": ["tick_s=10"],
}


@pytest.mark.slow
@pytest.mark.parametrize("policy", available())
def test_live_controller_enacts_what_the_simulator_does(policy: str, store: Store,
                                                        tmp_path: Path) -> None:
    opts = OPTIONS.get(policy, [])
    sim, sim_ended = simulate(TRACE, policy, opts, NODES, GPUS, FAILURES)
    live, live_ended = run_live(TRACE, policy, opts, NODES, GPUS, store, tmp_path / "jobs",
                                FAILURES)
    assert sim, f"{policy} did nothing in simulation"
    assert live == sim
    assert live_ended == sim_ended
    from stint.runtime.store import Caller

    rows = store.list_jobs(Caller(0, "admin", True))  # the forecasts (which changed nothing) ran
    assert any(r.est_start_at is not None for r in rows)
