"""Reported figures: makespan and utilization end at the last completion, a decision period
never loses its wake-up, and the cost model follows the trace's format and ``--restart-s``."""

import gzip
import json

import pytest
from typer.testing import CliRunner

from stint import data_path
from stint.cli import app
from stint.model import Allocation, Cluster, JobSpec, Plan
from stint.perf.scaling import ScalingModel
from stint.policies.base import ClusterView, PolicyBase
from stint.policies.fifo import Fifo
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator


class Grower(PolicyBase):
    """Starts a on one GPU at 0; at 10 (when b arrives) grows it to two, so a finishes at 55."""

    name = "grower"
    tick_s = None

    def plan(self, view: ClusterView) -> Plan:
        ids = {st.job_id for st in view.jobs}
        if view.now == 0.0:
            return Plan({"a": Allocation.of({0: 1})})
        if view.now == 10.0 and "a" in ids:
            return Plan({"a": Allocation.of({0: 2}), "b": Allocation.of({0: 1})})
        return Plan()


def test_makespan_and_utilization_end_at_the_last_completion():
    jobs = [JobSpec("a", 0.0, 100.0, 1, 1, 2), JobSpec("b", 10.0, 1.0)]
    res = Simulator(Cluster.uniform(1, 4), jobs, Grower(), ScalingModel(), CostModel.free()).run()
    s = res.summary()
    # a: 10 s on 1 GPU, then 90 units at rate 2 -> done at 55; its first completion event (at
    # 100) is stale and must not stretch the run. Busy: a 10x1 + 45x2, b 1x1 = 101 GPU-s.
    assert max(r.finish_s for r in res.records) == pytest.approx(55.0)
    assert s["makespan_s"] == pytest.approx(55.0)
    assert s["gpu_utilization"] == pytest.approx(101.0 / (4 * 55.0))


def test_decision_period_wakes_up_after_a_tick_with_no_job():
    # a ends at 70 (off-period, b still runs: a wake-up is set for 120); b ends at 100, so the
    # tick at 120 finds no job. c arrives at 130: it must start at the next period, 180.
    jobs = [JobSpec("a", 0.0, 70.0), JobSpec("b", 0.0, 100.0), JobSpec("c", 130.0, 10.0)]
    sim = Simulator(Cluster.uniform(1, 4), jobs, Fifo(), ScalingModel(), CostModel.free(), decision_period_s=60.0)
    r = {x.job_id: x for x in sim.run().records}
    assert r["c"].completed and r["c"].first_start_s == 180.0 and r["c"].finish_s == 190.0


def test_a_fractional_decision_period_decides_at_every_multiple():
    # b arrives at 0.25: the next instant is 3 x 0.1 (0.30000000000000004 in floating point).
    jobs = [JobSpec("a", 0.05, 1.0), JobSpec("b", 0.25, 1.0)]
    sim = Simulator(Cluster.uniform(1, 4), jobs, Fifo(), ScalingModel(), CostModel.free(), decision_period_s=0.1)
    r = {x.job_id: x for x in sim.run().records}
    assert r["a"].first_start_s == pytest.approx(0.1) and r["b"].first_start_s == pytest.approx(0.3)


def _sim_json(tmp_path, name, *args):
    out = tmp_path / name
    res = CliRunner().invoke(app, ["sim", "--out", str(out), "--format", "json", "--no-plots", *args])
    assert res.exit_code == 0, res.output
    return json.loads((out / "summary.json").read_text())["fifo"]


def test_a_pollux_csv_given_as_a_path_gets_pollux_costs(tmp_path):
    path = tmp_path / "w6.csv"
    path.write_bytes(gzip.decompress(data_path("pollux/workloads/workload-6.csv.gz").read_bytes()))
    by_path = _sim_json(tmp_path, "path", "--trace", str(path), "--policy", "fifo", "--limit", "12")
    by_name = _sim_json(tmp_path, "name", "--trace", "pollux:6", "--policy", "fifo", "--limit", "12")
    assert by_path["avg_jct_s"] == pytest.approx(by_name["avg_jct_s"])
    assert by_path["job_model"] == by_name["job_model"] == "pollux-progress"
    plain = _sim_json(tmp_path, "plain", "--trace", "pollux:6", "--policy", "fifo", "--limit", "12",
                      "--job-model", "samples")
    assert plain["job_model"] == "samples" and plain["avg_jct_s"] < by_name["avg_jct_s"]
    assert by_path["cost_model"] == by_name["cost_model"] == {
        "name": "pollux", "start_s": 30.0, "resume_s": 30.0, "resize_s": 30.0, "migrate_s": 30.0,
        "stop_s": 0.0,
    }


def test_restart_s_keeps_the_first_start_charge_of_the_format(tmp_path):
    common = ["--trace", "pollux:6", "--policy", "fifo", "--limit", "12"]
    default = _sim_json(tmp_path, "default", *common)
    given = _sim_json(tmp_path, "given", *common, "--restart-s", "30")
    assert given["avg_jct_s"] == pytest.approx(default["avg_jct_s"])
    short = _sim_json(tmp_path, "short", *common, "--restart-s", "5")
    assert short["cost_model"]["start_s"] == 5.0 and short["cost_model"]["resize_s"] == 5.0
    philly = _sim_json(tmp_path, "philly", "--trace", "philly", "--policy", "fifo", "--limit", "50",
                       "--gpus", "64", "--restart-s", "5")
    assert philly["job_model"] == "recorded-duration"
    assert philly["cost_model"] == {
        "name": "default", "start_s": 0.0, "resume_s": 5.0, "resize_s": 5.0, "migrate_s": 5.0,
        "stop_s": 0.0,
    }


def test_batch_mode_is_chosen_per_policy_and_stated(tmp_path):
    out = tmp_path / "b"
    args = ["sim", "--trace", "pollux:6", "--policy", "fifo,pollux", "--limit", "12", "--out", str(out),
            "--format", "json", "--no-plots"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert (s["fifo"]["batch"], s["pollux"]["batch"]) == ("fixed", "adaptive")
    res = CliRunner().invoke(app, [*args, "--batch", "fixed"])
    assert json.loads((out / "summary.json").read_text())["pollux"]["batch"] == "fixed"
    assert CliRunner().invoke(app, [*args, "--batch", "huge"]).exit_code == 2
