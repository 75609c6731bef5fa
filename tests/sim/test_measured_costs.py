"""The live cost model: fitted from measured attempts, and a stop's cost charged to the job
that waits for the GPUs it frees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stint.cli import app
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies.registry import make_with_options
from stint.runtime.measured import AttemptTimes, samples, step_times
from stint.runtime.store import NewJob, Store
from stint.runtime.tables import Attempt
from stint.sim.costs import AttemptSample, CostModel, fit
from stint.sim.engine import Simulator


def _attempt(job: int, n: int, launched: float, first: float | None, first_step: int | None,
             ended: float, end_step: int | None, stop: float | None = None,
             outcome: str = "succeeded", resumed: bool = False) -> AttemptTimes:
    return AttemptTimes(job, n, 1, resumed, launched, first, first_step, stop, ended, end_step,
                        outcome)


def test_launch_cost_excludes_the_steps_made_before_the_first_report() -> None:
    # launched at 10, first seen at step 2 at 15; 1 s a step (steps 2..12 from 15 to 25)
    rows = [_attempt(1, 1, 10.0, 15.0, 2, 25.0, 12)]
    got = samples(rows)[0]
    assert got.step_s == 1.0
    assert got.launch_s == 3.0  # 5 s to the report, less the 2 steps it made by then
    assert step_times(rows) == {1: {1: 1.0}}


def test_a_resumed_attempt_counts_its_steps_from_where_the_last_one_ended() -> None:
    rows = [_attempt(1, 1, 0.0, 4.0, 1, 14.0, 11, stop=13.0, outcome="checkpointed"),
            _attempt(1, 2, 20.0, 26.0, 12, 36.0, 22, resumed=True)]
    first, second = samples(rows)
    assert first.stop_s == 1.0 and first.step_s == 0.9  # the steps end at the stop request
    assert second.resumed and second.launch_s == 5.0  # 6 s, less its one step of 1 s


def test_fit_takes_medians_and_charges_a_move_a_stop_and_a_resume() -> None:
    got = fit([AttemptSample(1, False, x, None, 1.0) for x in (2.0, 3.0, 10.0)]
              + [AttemptSample(1, True, 4.0, None, 1.0), AttemptSample(1, False, None, 1.5, 1.0)])
    assert (got.costs.start_s, got.costs.resume_s, got.costs.stop_s) == (3.0, 4.0, 1.5)
    assert got.costs.resize_s == got.costs.migrate_s == 5.5
    assert got.low.start_s <= got.costs.start_s <= got.high.start_s
    assert got.samples == {"start": 3, "resume": 1, "stop": 1}
    assert fit([]).costs == CostModel.free()


def test_a_job_started_on_gpus_a_stop_frees_waits_for_the_stop() -> None:
    # Tiresias demotes job a after 10 GPU-s; b (8 s) then takes its GPU and ends before its own
    # demotion; a resumes on the GPU b's end frees (no stop to wait for).
    jobs = [JobSpec("a", 0.0, 100.0), JobSpec("b", 5.0, 8.0)]

    def run(costs: CostModel) -> dict[str, float]:
        sim = Simulator(Cluster.uniform(1, 1), jobs,
                        make_with_options("tiresias", ["thresholds_gpu_s=10", "tick_s=1"]),
                        ScalingModel(), costs)
        return {r.job_id: r.finish_s for r in sim.run().records}

    free = run(CostModel.free())
    stop = run(CostModel(0.0, 0.0, 0.0, 0.0, stop_s=2.0))
    assert free["b"] == 18.0
    assert stop["b"] == free["b"] + 2.0
    assert stop["a"] == free["a"] + 2.0  # only the time b lost


@pytest.mark.slow
def test_sim_costs_from_a_store_charges_what_it_measured(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'stint.db'}")
    store.migrate()
    who = store.caller_for_token(store.create_token("alice", 0.0))
    assert who is not None
    job = store.add_job(NewJob("a", ["true"], 1, 1, 1, "standard", 1.0, None), who, 0.0)
    with store.session() as s:  # 4 s from launch to step 1 at 1 s a step: a 3 s launch
        s.add(Attempt(job_id=job.id, attempt=1, workers=1, resumed=False, launched_at=0.0,
                      first_step_at=4.0, first_step=1, ended_at=14.0, end_step=11,
                      outcome="succeeded"))
    store.close()
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["sim", "--trace", "philly", "--policy", "fifo", "--gpus", "64",
                                   "--limit", "20", "--out", str(out), "--format", "json",
                                   "--costs-from", str(tmp_path)])
    assert res.exit_code == 0, res.output
    costs = json.loads((out / "summary.json").read_text())["fifo"]["cost_model"]
    assert costs["name"] == "measured" and costs["start_s"] == 3.0
    bad = CliRunner().invoke(app, ["sim", "--trace", "philly", "--policy", "fifo", "--gpus", "64",
                                   "--limit", "5", "--out", str(out), "--costs-from",
                                   str(tmp_path / "nowhere")])
    assert bad.exit_code != 0 and "no stint.db here" in bad.output
