"""What policies know of a job's length: the declaration or the learned estimate, never the truth
(unless ``--knowledge oracle``), set once where the status is built (``policies/knowledge.py``)."""

import json
import random

import numpy as np
import pytest
from builders import records, rigid  # type: ignore[import-not-found]
from typer.testing import CliRunner

from stint.cli import app
from stint.model import Cluster
from stint.policies import make
from stint.policies.base import JobStatus
from stint.policies.knowledge import DEFAULT_S, Knowledge, Mode, Source, known_total
from stint.policies.singularity_table import known_left
from stint.sim.trace_fields import TraceError
from stint.sim.traces import load

# One GPU. A: t=0, 100 s, declared 100 s. B: t=10, 20 s, but declared 200 s.
MISDECLARED = [rigid("A", 0, 100, est=100), rigid("B", 10, 20, est=200)]


def test_srtf_orders_by_the_declared_length_not_the_recorded_one():
    # At 10 A has 90 s left as declared, B 200 s: B waits for A (100), runs 100-120: JCT 110.
    r = records(make("srtf"), MISDECLARED, Cluster.uniform(1, 1))
    assert (r["A"].jct_s, r["B"].jct_s) == (100, 110)
    assert (r["B"].est_s, r["B"].est_source) == (200, "declared")


def test_oracle_knowledge_keeps_the_recorded_length():
    # At 10 B's true 20 s < A's 90 s left: B preempts A, runs 10-30 (JCT 20); A ends at 120.
    r = records(make("srtf"), MISDECLARED, Cluster.uniform(1, 1), knowledge=Knowledge(Mode.ORACLE))
    assert (r["A"].jct_s, r["B"].jct_s) == (120, 20)
    assert r["B"].est_source == "oracle" and r["B"].est_s == 20


def test_without_a_declaration_the_user_history_estimates():
    # u's jobs run one at a time: 10, 30, 20 s (median 20); v's never finish before w arrives.
    jobs = [rigid("a", 0, 10), rigid("b", 10, 30), rigid("c", 40, 20), rigid("d", 100, 5),
            rigid("e", 100.5, 7, user="v"), rigid("f", 101, 9, 2)]
    r = records(make("fifo"), jobs, Cluster.uniform(1, 2))
    assert (r["a"].est_s, r["a"].est_source) == (DEFAULT_S, "default")  # nothing finished yet
    assert (r["b"].est_source, r["b"].est_s) == ("all-users-history", 10)  # u has 1 job: too few
    assert (r["d"].est_source, r["d"].est_s) == ("user-gpus-history", 20)  # median of 10, 30, 20
    assert (r["e"].est_source, r["e"].est_s) == ("all-users-history", 20)  # v has no history
    assert (r["f"].est_source, r["f"].est_s) == ("user-history", 20)  # u never ran on 2 GPUs


def test_a_job_past_its_estimate_is_expected_to_run_as_long_again():
    st = JobStatus(rigid("A", 0, 100), work_done=30.0, est_work=20.0)
    assert known_total(20.0, 30.0) == 40.0 and st.known_remaining_at(0.0) == 10.0
    assert known_total(20.0, 20.0) == 20.0 and known_total(20.0, 81.0) == 160.0
    assert JobStatus(rigid("B", 0, 100), work_done=5.0).known_remaining_at(0.0) == 95.0  # unset: spec.work
    rnd = random.Random(3)
    known = np.array([rnd.choice((1.0, 3.0, 7.5, 100.0)) for _ in range(2000)])
    done = np.array([k * rnd.choice((0.0, 0.5, 1.0, 2.0, 4.0, rnd.uniform(0, 40))) for k in known])
    want = [known_total(k, d) - d for k, d in zip(known, done, strict=True)]
    assert known_left(known, done).tolist() == want  # singularity's columns: the same floats


def test_summary_json_states_the_knowledge_and_the_estimate_error(tmp_path):
    trace = tmp_path / "declared.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster,est_s\n"
                     "2017-10-09 07:00:00,100,1,100,vc1,200\n"
                     "2017-10-09 07:00:10,50,1,50,vc1,\n"
                     "2017-10-09 07:00:20,40,1,40,vc1,40\n")
    jobs = load(str(trace)).jobs
    assert [j.est_s for j in jobs] == [200.0, None, 40.0]
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["sim", "--trace", str(trace), "--policy", "srtf", "--nodes", "1",
                                   "--gpus-per-node", "1", "--out", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    k = json.loads((out / "summary.json").read_text())["srtf"]["knowledge"]
    assert k["mode"] == "declared" and k["sources"] == {"declared": 2, "default": 1}
    # estimate / truth: 2, 3600 / 50 = 72, 1: median 2; |log2| 1, 6.17, 0: within 2x 2 of 3.
    assert k["error"]["median_ratio"] == 2.0 and k["error"]["within_2x"] == pytest.approx(2 / 3)
    res = CliRunner().invoke(app, ["sim", "--trace", str(trace), "--policy", "srtf", "--nodes", "1",
                                   "--gpus-per-node", "1", "--out", str(out), "--format", "json",
                                   "--knowledge", "oracle"])
    k = json.loads((out / "summary.json").read_text())["srtf"]["knowledge"]
    assert k["mode"] == "oracle" and k["sources"] == {"oracle": 3} and k["error"]["median_ratio"] == 1.0


def test_a_bad_declared_length_names_file_and_line(tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("name,time,application,num_replicas,batch_size,est_s\na,1,bert,2,24,soon\n")
    with pytest.raises(TraceError, match=r"bad.csv:2: field 'est_s' is not a float: 'soon'"):
        load(str(trace))
    trace.write_text("name,time,application,num_replicas,batch_size,est_s\na,1,bert,2,24,0\n")
    with pytest.raises(TraceError, match=r"bad.csv:2: field 'est_s' must be >= 1e-09"):
        load(str(trace))
    assert Source.DECLARED == "declared"
