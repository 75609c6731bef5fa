"""``stint replay``'s machinery on the parity trace: the controller records its decisions, and
the twin (``runtime/twin.py``), reading only the store, simulates the same submissions with the
same policy and finds the same decision sequence and JCTs (a clocked executor: no costs, lengths
as declared). A changed policy shows as a difference."""

from __future__ import annotations

from pathlib import Path

import pytest
from parity_helpers import TraceJob, run_live  # type: ignore[import-not-found]

from stint.runtime.measured import attempts
from stint.runtime.store import Store
from stint.runtime.twin import Step, canonical, compare, load

TRACE = [
    TraceJob(0.0, 100.0, 2, 2, 2),
    TraceJob(0.0, 60.0, 1, 1, 1),
    TraceJob(5.0, 80.0, 2, 1, 4),
    TraceJob(5.0, 40.0, 4, 4, 4),
    TraceJob(5.0, 30.0, 1, 1, 1),
    TraceJob(20.0, 50.0, 2, 1, 2),
    TraceJob(90.0, 20.0, 1, 1, 1),
]
OPTIONS = {"tiresias": ["thresholds_gpu_s=60", "tick_s=10"]}


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "singularity"])
def test_the_twin_of_a_clocked_run_decides_the_same(policy: str, store: Store,
                                                    tmp_path: Path) -> None:
    opts = OPTIONS.get(policy, [])
    live, _ = run_live(TRACE, policy, opts, 2, 2, store, tmp_path / "jobs")
    run = load(store)
    assert len(run.decisions) == len(live)  # every enacted action is in the store
    report = compare(run, policy, opts)
    t = report.totals
    assert t["decisions_identical"], t["first_difference"]
    assert t["mean_jct_deviation_pct"] is not None and abs(t["mean_jct_deviation_pct"]) < 1e-6
    tried = attempts(store)  # every attempt's launch and end measured, a stop's request too
    assert tried and all(a.ended_at is not None and a.outcome for a in tried)
    assert sum(a.stop_at is not None for a in tried) == sum(
        a.outcome == "checkpointed" for a in tried)
    if policy == "tiresias":
        assert t["preemptions_live"] == t["preemptions_sim"] > 0


def test_another_policy_shows_where_the_decisions_part(store: Store, tmp_path: Path) -> None:
    run_live(TRACE, "fifo", [], 2, 2, store, tmp_path / "jobs")
    report = compare(load(store), "tiresias", OPTIONS["tiresias"])
    assert not report.totals["decisions_identical"]
    assert str(report.totals["first_difference"]).startswith("decision ")


def test_decisions_closer_than_the_jitter_may_swap() -> None:
    a = [Step(0.0, "start", "1", 1), Step(0.4, "start", "2", 1), Step(9.0, "preempt", "1", 0)]
    b = [Step(0.1, "start", "2", 1), Step(0.2, "start", "1", 1), Step(9.5, "preempt", "1", 0)]
    assert canonical(a, 2.0) == canonical(b, 2.0)
    assert canonical(a, 0.05) != canonical(b, 0.05)
