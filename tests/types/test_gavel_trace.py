"""Gavel's trace format, and the bar: a two-type cluster file and a Gavel trace under gavel, sia
and tiresias complete every job, with utilization per type in summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typed_helpers import write_gavel  # type: ignore[import-not-found]

from stint.sim.cli import main
from stint.sim.cluster_input import read_cluster
from stint.sim.trace_fields import TraceError
from stint.sim.traces import load


def test_a_gavel_trace_reads_with_its_throughputs(tmp_path: Path) -> None:
    cluster_file, trace = write_gavel(tmp_path, jobs=6)
    tput = read_cluster(cluster_file).throughputs
    got = load(str(trace), throughputs=tput)
    assert got.format == "gavel" and got.job_model == "gavel-steps" and len(got.jobs) == 6
    first = trace.read_text().splitlines()[0].split("\t")
    kind, steps, scale = first[0], float(first[5]), int(first[6])
    job = got.jobs[0]
    assert job.requested_workers == job.min_workers == job.max_workers == scale
    assert tput is not None
    row = tput.of(kind, scale)
    assert row is not None
    assert job.work == pytest.approx(steps / max(row.values()))  # seconds on its fastest type
    assert job.gpu_types == (() if kind == "A" else ("v100",))  # B has no k80 throughput
    assert got.speeds is not None


def test_gavel_rows_are_checked_with_their_line(tmp_path: Path) -> None:
    cluster_file, trace = write_gavel(tmp_path, jobs=3)
    tput = read_cluster(cluster_file).throughputs
    lines = trace.read_text().splitlines()
    bad = lines[1].split("\t")
    bad[5] = "many"
    trace.write_text("\n".join([lines[0], "\t".join(bad), lines[2]]) + "\n")
    with pytest.raises(TraceError, match=r"jobs.trace:2: field 'total_steps' is not a float"):
        load(str(trace), throughputs=tput)
    bad[5], bad[0] = "10", "Z"
    trace.write_text("\n".join([lines[0], "\t".join(bad)]) + "\n")
    with pytest.raises(TraceError, match=r"jobs.trace:2: job type 'Z' at scale factor \d+ has no throughput"):
        load(str(trace), throughputs=tput)
    trace.write_text(lines[0] + "\n")
    with pytest.raises(TraceError, match=r"jobs.trace:1: a Gavel trace needs its throughputs"):
        load(str(trace))
    trace.write_text(lines[0] + "\textra\n")
    with pytest.raises(TraceError, match=r"unrecognised header"):
        load(str(trace), throughputs=tput)


@pytest.mark.slow
def test_gavel_sia_and_tiresias_complete_a_gavel_trace_on_two_types(tmp_path: Path) -> None:
    cluster_file, trace = write_gavel(tmp_path, jobs=30)
    out = tmp_path / "out"
    code = main(["--cluster", str(cluster_file), "--trace", str(trace), "--policy", "gavel,sia,tiresias",
                 "--out", str(out), "--format", "json"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    for name in ("gavel", "sia", "tiresias"):
        s = summary[name]
        assert s["completed"] == s["jobs"] == 30, name
        assert s["refused_actions"] == 0, name
        by_type = s["utilization_by_type"]
        assert set(by_type) == {"v100", "k80"} and by_type["v100"]["gpus"] == 8
        assert 0 < by_type["v100"]["gpu_utilization"] <= 1
    # the heterogeneity-aware ones use the fast type better than a type-blind one
    assert summary["gavel"]["avg_jct_s"] < summary["tiresias"]["avg_jct_s"]


def test_a_bad_cluster_file_exits_2_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.toml").write_text('[[group]]\ngpu_type = "a"\nnodes = "two"\ngpus_per_node = 4\n')
    assert main(["--cluster", str(tmp_path / "c.toml"), "--trace", "pollux:1", "--out", str(tmp_path / "o")]) == 2
    assert "c.toml:3: group 1: nodes must be a whole number" in capsys.readouterr().err
    assert main(["--cluster", str(tmp_path / "c.toml"), "--nodes", "2", "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o" / "summary.json").exists()
