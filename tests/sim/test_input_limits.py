"""The simulator's input limits (``stint.model.limits``, docs/simulator.md "Input limits"): a size
just above its maximum is refused with its file and line or its flag, exit code 2, nothing
written; a size at the maximum is accepted; ``--limit N`` reads a file only up to its Nth job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stint.cli import app
from stint.model import limits as lim
from stint.model.fleet import FleetError, parse_fleet
from stint.sim import cli
from stint.sim.sweep import SweepConfig
from stint.sim.trace_fields import TraceError
from stint.sim.traces import Filters, _Pick, load, parse_shaped

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
POLLUX_HEADER = "name,time,application,num_replicas,batch_size\n"
ROW = "2017-10-09 07:00:00,60.0,1,60.0,a\n"


def _sim(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``stint sim ARGS`` writing to tmp_path/r: (exit code, stderr)."""
    code = cli.main(["--policy", "fifo", "--out", str(tmp_path / "r"), "--format", "json", *args])
    return code, capsys.readouterr().err


# ------------------------------------------------------------------------------- trace rows
@pytest.mark.parametrize("header, row, field, maximum", [
    (PHILLY_HEADER, "2017-10-09 07:01:55,66.0,{n},66.0,a\n", "num_gpus", lim.MAX_JOB_GPUS),
    (POLLUX_HEADER, "j,5,bert,{n},24\n", "num_replicas", lim.MAX_JOB_GPUS),
    (POLLUX_HEADER, "j,5,cifar10,2,{n}\n", "batch_size", lim.MAX_BATCH_SIZE),
])
def test_a_trace_field_above_its_maximum_names_file_and_line(tmp_path, header, row, field, maximum):
    p = tmp_path / "t.csv"
    p.write_text(header + row.format(n=2) + row.format(n=maximum + 1))
    with pytest.raises(TraceError) as err:
        load(str(p))
    assert str(err.value).startswith(f"{p}:3: field {field!r} is {maximum + 1:,}, above the maximum of {maximum:,}")
    p.write_text(header + row.format(n=2) + row.format(n=maximum))
    assert len(load(str(p)).jobs) == 2  # at the maximum: accepted


def test_sim_refuses_a_job_above_the_maximum_and_writes_nothing(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(PHILLY_HEADER + ROW + f"2017-10-09 07:01:00,60.0,{lim.MAX_JOB_GPUS + 1},60.0,a\n")
    code, err = _sim(tmp_path, capsys, "--trace", str(trace))
    assert code == 2 and f"{trace}:3: field 'num_gpus' is 1,000,001, above the maximum" in err
    assert "Traceback" not in err and not (tmp_path / "r" / "summary.json").exists()
    trace.write_text(PHILLY_HEADER + ROW + f"2017-10-09 07:01:00,60.0,{lim.MAX_JOB_GPUS},60.0,a\n")
    code, err = _sim(tmp_path, capsys, "--trace", str(trace), "--gpus", "64")
    assert code == 0, err  # at the maximum: run, and rejected (larger than the cluster)
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["fifo"]["rejected"] == 1


def test_rows_of_a_trace_read_whole_are_bounded(tmp_path):
    rows = [(float(i), i + 2, "a", ()) for i in range(4)]
    pick = _Pick("t.csv", Filters(), stream=False, max_rows=3)
    with pytest.raises(TraceError, match=r"^t\.csv:5: more than 3 rows, the most a trace read whole"):
        pick.rows(rows, from_first=True)
    assert len(pick.rows(rows[:3], from_first=True)[0]) == 3  # at the maximum
    with pytest.raises(TraceError, match="the limit is 2,000,001, above the maximum of 2,000,000"):
        load("philly", filters=Filters(limit=lim.MAX_TRACE_JOBS + 1))


def test_the_benchmarks_sizes_are_within_the_maxima():
    assert lim.MAX_TRACE_JOBS >= 1_000_000 and lim.MAX_CLUSTER_GPUS >= 100_000  # sim_million, fleet_scale
    assert parse_shaped("philly-shaped:1000000:100000") == (1_000_000, 100_000)
    assert parse_shaped(f"philly-shaped:{lim.MAX_TRACE_JOBS}:{lim.MAX_CLUSTER_GPUS}") == (
        lim.MAX_TRACE_JOBS, lim.MAX_CLUSTER_GPUS)
    with pytest.raises(TraceError, match="--trace philly-shaped:2000001: N \\(jobs\\) is 2,000,001, above"):
        parse_shaped("philly-shaped:2000001")
    with pytest.raises(TraceError, match="GPUS is 1,000,001, above the maximum of 1,000,000"):
        parse_shaped("philly-shaped:10:1000001")


# --------------------------------------------------------------------------- --limit streams
def test_limit_reads_a_million_row_file_only_up_to_its_nth_job(tmp_path, capsys):
    big = tmp_path / "big.csv"
    big.write_text(PHILLY_HEADER + ROW * 1_000_000 + "2017-10-09 07:00:00,not-a-number,1,60.0,a\n")
    jobs = load(str(big), filters=Filters(limit=1000)).jobs
    assert [j.job_id for j in jobs] == [f"philly-{i}" for i in range(1, 1001)]
    code, err = _sim(tmp_path, capsys, "--trace", str(big), "--limit", "1000")
    assert code == 0, err
    assert (tmp_path / "r" / "summary.json").exists()


def test_limit_leaves_rows_past_the_nth_job_or_the_window_unread(tmp_path):
    p = tmp_path / "t.csv"
    rows = [f"2017-10-09 07:00:{s:02d},60.0,1,60.0,{'ab'[s % 2]}\n" for s in range(20)]
    p.write_text(PHILLY_HEADER + "".join(rows) + "2017-10-09 07:00:30,60.0,0,60.0,a\n")
    with pytest.raises(TraceError, match=r":22: field 'num_gpus' must be >= 1"):
        load(str(p))  # read whole: the bad row is read
    assert len(load(str(p), filters=Filters(limit=5)).jobs) == 5
    vc = load(str(p), filters=Filters(limit=5, vc="b"))
    assert [j.job_id for j in vc.jobs] == ["philly-2", "philly-4", "philly-6", "philly-8", "philly-10"]
    window = load(str(p), filters=Filters(limit=100, start_s=3, end_s=8))
    assert [j.job_id for j in window.jobs] == [f"philly-{i}" for i in range(4, 9)]


def test_limit_needs_a_file_in_arrival_order_and_names_the_row_out_of_it(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(PHILLY_HEADER + ROW + "2017-10-09 07:00:09,60.0,1,60.0,a\n" + "2017-10-09 07:00:05,60.0,1,60.0,a\n")
    with pytest.raises(TraceError, match=r":4: row out of arrival order \(it arrives before line 3\)"):
        load(str(p), filters=Filters(limit=3))
    assert len(load(str(p), filters=Filters(limit=2)).jobs) == 2  # the row out of order is not read
    assert [j.job_id for j in load(str(p)).jobs] == ["philly-1", "philly-3", "philly-2"]  # whole: sorted


@pytest.mark.slow
def test_the_shipped_philly_log_out_of_order_still_gives_the_first_jobs_by_arrival():
    whole = load("philly").jobs
    first = load("philly", filters=Filters(limit=50)).jobs
    assert [j.job_id for j in first] == [j.job_id for j in whole[:50]]


# ---------------------------------------------------------------------------------- flags
@pytest.mark.parametrize("args, message", [
    (["--gpus", "1000008"], "error: --gpus is 1,000,008, above the maximum of 1,000,000"),
    (["--nodes", "200001", "--gpus-per-node", "1"], "error: --nodes is 200,001, above the maximum of 200,000"),
    (["--nodes", "1", "--gpus-per-node", "1025"], "error: --gpus-per-node is 1,025, above the maximum of 1,024"),
    (["--nodes", "1000", "--gpus-per-node", "1001"],
     "error: --nodes x --gpus-per-node (1,000 x 1,001 GPUs) is 1,001,000, above the maximum of 1,000,000"),
    (["--nodes", "125001"], "error: --nodes x --gpus-per-node (125,001 x 8 GPUs) is 1,000,008, above"),
    (["--limit", "2000001"], "error: --limit is 2,000,001, above the maximum of 2,000,000"),
    (["--limit", "0"], "error: --limit must be at least 1 (got 0)"),
    (["--fleet", "f.toml", "--fleet-jobs", "2000001"], "error: --fleet-jobs is 2,000,001, above the maximum"),
    (["--trace", "philly-shaped:2000001"], "error: --trace philly-shaped:2000001: N (jobs) is 2,000,001, above"),
])
def test_a_size_flag_above_its_maximum_is_named(tmp_path, capsys, args, message):
    trace = tmp_path / "t.csv"
    trace.write_text(PHILLY_HEADER + ROW)
    code, err = _sim(tmp_path, capsys, "--trace", str(trace), *args)
    assert code == 2 and err.startswith(message), err
    assert "Traceback" not in err and not (tmp_path / "r" / "summary.json").exists()


@pytest.mark.slow
def test_size_flags_at_their_maxima_are_accepted(tmp_path, capsys):
    at_max = cli.parser().parse_args(["--gpus", str(lim.MAX_CLUSTER_GPUS), "--limit", str(lim.MAX_TRACE_JOBS),
                                      "--fleet-jobs", str(lim.MAX_TRACE_JOBS)])
    assert cli._size_flags(at_max) is None
    at_max = cli.parser().parse_args(["--nodes", "976", "--gpus-per-node", str(lim.MAX_GPUS_PER_NODE)])
    assert cli._size_flags(at_max) is None
    trace = tmp_path / "t.csv"
    trace.write_text(PHILLY_HEADER + ROW * 3)
    code, err = _sim(tmp_path, capsys, "--trace", str(trace), "--nodes", str(lim.MAX_NODES), "--gpus-per-node", "5")
    assert code == 0, err  # 200,000 nodes x 5 = 1,000,000 GPUs: both maxima
    assert (tmp_path / "r" / "summary.json").exists()


def test_sweep_refuses_sizes_above_the_maxima(tmp_path):
    for cfg, message in [
        (SweepConfig(gpus=(64, 1_000_008)), "--gpus is 1,000,008, above the maximum of 1,000,000"),
        (SweepConfig(filters=Filters(limit=2_000_001)), "--limit is 2,000,001, above the maximum"),
        (SweepConfig(filters=Filters(limit=0)), "--limit must be at least 1"),
        (SweepConfig(traces=("philly-shaped:2000001",)), "N (jobs) is 2,000,001, above the maximum"),
    ]:
        with pytest.raises(ValueError) as err:
            cfg.check()
        assert message in str(err.value)
    SweepConfig(gpus=(lim.MAX_CLUSTER_GPUS,), filters=Filters(limit=lim.MAX_TRACE_JOBS)).check()  # at the maxima
    res = CliRunner().invoke(app, ["sweep", "--gpus", "1000008", "--workers", "1", "--out", str(tmp_path / "s")])
    assert res.exit_code == 2 and "--gpus is 1,000,008, above the maximum" in res.output
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------ fleet files
def _cluster(name: str, nodes: int, gpus_per_node: int, region: str = "east") -> str:
    return f"[region.{region}.cluster.{name}]\nnodes = {nodes}\ngpus_per_node = {gpus_per_node}\n\n"


@pytest.mark.parametrize("nodes, per_node, line, message", [
    (lim.MAX_NODES + 1, 1, 3, "region.east.cluster.c1.nodes is 200,001, above the maximum of 200,000"),
    (1, lim.MAX_GPUS_PER_NODE + 1, 4, "region.east.cluster.c1.gpus_per_node is 1,025, above the maximum of 1,024"),
    (lim.MAX_NODES, 8, 3, "region.east.cluster.c1.nodes x gpus_per_node is 1,600,000, above the maximum"),
])
def test_a_fleet_cluster_above_a_maximum_names_its_line(nodes, per_node, line, message):
    text = "# a fleet\n" + _cluster("c1", nodes, per_node)
    with pytest.raises(FleetError) as err:
        parse_fleet(text, "f.toml")
    assert str(err.value).startswith(f"f.toml:{line}: {message}")
    assert parse_fleet("# a fleet\n" + _cluster("c1", lim.MAX_NODES, 5), "f.toml").total_gpus == 1_000_000


def test_a_fleet_above_its_clusters_gpus_or_failures_maximum_names_the_line():
    many = "".join(_cluster(f"c{i}", 1, 8) for i in range(lim.MAX_FLEET_CLUSTERS))
    assert len(parse_fleet(many, "f.toml").clusters) == lim.MAX_FLEET_CLUSTERS  # at the maximum
    with pytest.raises(FleetError) as err:
        parse_fleet(many + _cluster("last", 1, 8), "f.toml")
    line = 4 * lim.MAX_FLEET_CLUSTERS + 1
    assert str(err.value).startswith(f"f.toml:{line}: region.east.cluster.last: the number of clusters is 1,001")
    half = _cluster("a", 125_000, 4) + _cluster("b", 125_000, 4, "west")
    assert parse_fleet(half, "f.toml").total_gpus == lim.MAX_FLEET_GPUS  # at the maximum
    with pytest.raises(FleetError) as err:
        parse_fleet(half + _cluster("c", 1, 1, "west"), "f.toml")
    assert str(err.value).startswith("f.toml:10: region.west.cluster.c: the fleet's GPUs is 1,000,001, above")
    failure = '[[failure]]\nkind = "cluster"\ntarget = "a"\ndown_s = 1\nup_s = 2\n\n'
    assert len(parse_fleet(half + failure * lim.MAX_FLEET_FAILURES, "f.toml").failures) == lim.MAX_FLEET_FAILURES
    with pytest.raises(FleetError) as err:
        parse_fleet(half + failure * (lim.MAX_FLEET_FAILURES + 1), "f.toml")
    line = 8 + 6 * lim.MAX_FLEET_FAILURES + 2
    assert str(err.value).startswith(f"f.toml:{line}: the number of [[failure]] entries is 10,001, above")


def test_a_node_failure_of_a_huge_index_names_its_line():
    text = _cluster("a", 2, 8) + f'[[failure]]\nkind = "node"\ntarget = "a/{"9" * 5000}"\ndown_s = 1\nup_s = 2\n'
    with pytest.raises(FleetError, match=r"^f\.toml:7: failure 1: node failure target"):
        parse_fleet(text, "f.toml")


def test_sim_refuses_a_fleet_file_above_a_maximum_and_writes_nothing(tmp_path, capsys):
    f = tmp_path / "f.toml"
    f.write_text(_cluster("c1", lim.MAX_NODES + 1, 1))
    code, err = _sim(tmp_path, capsys, "--fleet", str(f), "--fleet-jobs", "10")
    assert code == 2 and err.startswith(f"error: {f}:2: region.east.cluster.c1.nodes is 200,001, above"), err
    assert "Traceback" not in err and not (tmp_path / "r" / "summary.json").exists()
