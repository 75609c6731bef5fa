"""Pollux's job model: work from the validation tables, rates on rounded batches, faithfulness."""

import csv
import gzip

import pytest

from stint import data_path
from stint.model import Allocation, Cluster
from stint.perf.profile import APPLICATIONS, ProfileModel, step_batch, throughput, work
from stint.perf.progress import efficiency_table
from stint.policies import make
from stint.policies.knowledge import Knowledge, Mode
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator
from stint.sim.traces import load


def _recorded_steps(app: str, batch: int) -> float:
    path = data_path(f"pollux/profiles/{app}/validation-{batch}.csv.gz")
    with gzip.open(path, "rt") as fh:
        rows = list(csv.DictReader(fh))
    return float(rows[APPLICATIONS[app].epochs - 1]["iteration"])


@pytest.mark.parametrize("app", ["cifar10", "imagenet", "ncf", "bert"])
def test_steps_to_the_last_epoch_match_the_measured_runs(app):
    # The model derives steps from progress and gradient statistics only; the tables also record
    # how many steps the real runs took: they must agree (within 7% up to the largest batch).
    table = efficiency_table(app, APPLICATIONS[app].epochs)
    assert table is not None and table.steps(table.initial_batch) == pytest.approx(table.target)
    for b in table.batch_sizes:
        assert table.steps(b) == pytest.approx(_recorded_steps(app, int(b)), rel=0.07), b


def test_pollux_trace_work_is_efficiency_weighted():
    t = load("pollux:6")
    assert t.job_model == "pollux-progress" and isinstance(t.perf, ProfileModel) and t.perf.progress
    by_app = {(j.application, j.batch_size): j.work for j in t.jobs}
    # NCF: 10 epochs of 4,970,854 samples at B0 = 256, 2% more at 32,768; CIFAR-10 at 4,096
    # needs 1.76x the 5M samples of 100 epochs at 128; DeepSpeech2 at 320 about 728k.
    assert by_app[("ncf", 32768)] == pytest.approx(50.85e6, rel=0.01)
    assert by_app[("cifar10", 4096)] == pytest.approx(8.78e6, rel=0.01)
    assert by_app[("deepspeech2", 320)] == pytest.approx(728e3, rel=0.01)
    plain = load("pollux:6", samples=True)
    assert plain.job_model == "samples" and not plain.perf.progress
    assert {j.work for j in plain.jobs if j.application == "ncf"} == {10 * 4_970_854.0}


def test_rate_on_a_rounded_batch_runs_the_rounded_batch_to_completion():
    spec = next(j for j in load("pollux:6").jobs if j.application == "bert")  # batch 384
    alloc = Allocation.of({0: 4, 1: 1})  # 5 replicas: local 77 -> 7 x 11 with accumulation
    actual = step_batch("bert", (4, 1), 384)
    assert actual == 385
    seconds = spec.work / ProfileModel(progress=True).rate(spec, alloc)
    assert seconds == pytest.approx(work("bert", actual) / throughput("bert", (4, 1), 384))


@pytest.mark.slow
@pytest.mark.parametrize("policy, pollux_s", [("tiresias", 3469.7), ("optimus", 5301.9)])
def test_workload_6_within_ten_percent_of_pollux(policy, pollux_s):
    # Oracle knowledge, as Pollux's simulator gives its Optimus the remaining iterations.
    trace = load("pollux:6")
    sim = Simulator(Cluster.uniform(16, 4), trace.jobs, make(policy), trace.perf, CostModel.pollux(),
                    knowledge=Knowledge(Mode.ORACLE))
    assert sim.run().summary()["avg_jct_s"] == pytest.approx(pollux_s, rel=0.10)
