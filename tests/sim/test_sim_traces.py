"""Trace readers: the shipped traces, filters, and bad input named by file, line and reason."""

import gzip

import pytest

from stint.sim.trace_fields import TraceError
from stint.sim.traces import Filters, load

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
POLLUX_HEADER = "name,time,application,num_replicas,batch_size\n"


@pytest.mark.slow
def test_shipped_philly_is_whole_and_sorted():
    t = load("philly")
    assert len(t.jobs) == 82_247
    arrivals = [j.arrival_s for j in t.jobs]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert sum(j.requested_workers == 1 for j in t.jobs) == 76_627  # 93% single-GPU, per README
    assert all(j.work == j.duration_s for j in t.jobs)


def test_filters_vc_window_limit():
    vc = load("philly", filters=Filters(vc="103959"))
    assert len(vc.jobs) == 1934 and {j.vc for j in vc.jobs} == {"103959"}
    day = load("philly", filters=Filters(start_s=30 * 86400, end_s=31 * 86400))
    assert 0 < len(day.jobs) < 5000 and day.jobs[-1].arrival_s < 86400
    assert len(load("philly", filters=Filters(limit=10)).jobs) == 10


def test_pollux_workload_and_gzip_path(tmp_path):
    t = load("pollux:6")
    assert len(t.jobs) == 160 and t.jobs[0].job_id == "cifar10-0"
    ncf = next(j for j in t.jobs if j.application == "ncf")
    assert ncf.max_workers == 1 and ncf.batch_size == 32768
    p = tmp_path / "w.csv.gz"
    p.write_bytes(gzip.compress((POLLUX_HEADER + "j,5,bert,2,24\n").encode()))
    assert load(str(p)).jobs[0].requested_workers == 2


@pytest.mark.parametrize(
    "body, line, reason",
    [
        ("2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 07:01:56,66.0,1\n", 3, "expected 5 fields, got 3"),
        ("2017-10-09 07:01:55,abc,1,66.0,11cb48\n", 2, "'duration' is not a float"),
        ("2017-10-09 07:01:55,66.0,0,0,11cb48\n", 2, "'num_gpus' must be >= 1"),
        ("09/10/2017,66.0,1,66.0,11cb48\n", 2, "'timestamp' is not YYYY-MM-DD"),
        ("2017-10-09 07:01:55,66.0,1,66.0,\n", 2, "'cluster' is empty"),
    ],
)
def test_malformed_philly_row_names_file_line_reason(tmp_path, body, line, reason):
    p = tmp_path / "bad.csv"
    p.write_text(PHILLY_HEADER + body)
    with pytest.raises(TraceError) as err:
        load(str(p))
    assert f"{p}:{line}:" in str(err.value) and reason in str(err.value)


def test_malformed_pollux_row_and_header(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text(POLLUX_HEADER + "a,1,bert,2,24\nb,2,gpt9,2,24\n")
    with pytest.raises(TraceError, match=r"w.csv:3: unknown application 'gpt9'"):
        load(str(p))
    p.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match=r"w.csv:1: unrecognised header"):
        load(str(p))
    with pytest.raises(TraceError, match="pollux:1 .. pollux:8"):
        load("pollux:9")
    with pytest.raises(TraceError, match="no such trace file"):
        load(str(tmp_path / "missing.csv"))


ROW = "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
GOOD = PHILLY_HEADER + ROW * 3


def _gz_truncated() -> bytes:
    data = gzip.compress((GOOD + ROW * 2000).encode())
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    "name, content, line, reason",
    [
        ("nan-arrival.csv", POLLUX_HEADER + "a,1,bert,2,24\nb,nan,bert,2,24\n", 3,
         "'time' must be a finite number"),
        ("inf-arrival.csv", POLLUX_HEADER + "a,inf,bert,2,24\n", 2, "'time' must be a finite"),
        ("nan-duration.csv", PHILLY_HEADER + ROW + "2017-10-09 07:01:56,NaN,1,66.0,11cb48\n", 3,
         "'duration' must be a finite number"),
        ("huge-duration.csv", PHILLY_HEADER + "2017-10-09 07:01:56,1e400,1,66.0,11cb48\n", 2,
         "'duration' must be a finite number"),
        ("oversized.csv", PHILLY_HEADER + ROW + f"2017-10-09 07:01:56,1,1,1,{'x' * 200_000}\n", 3,
         "field larger than field limit"),
        ("quote.csv", PHILLY_HEADER + ROW + '2017-10-09 07:01:56,1,1,1,"abc\n' + ROW * 3, 3,
         "unterminated quote"),
        ("truncated.csv.gz", _gz_truncated(), None, "truncated archive"),
        ("plain.csv.gz", GOOD.encode(), 1, "not a valid gzip file"),
        ("latin1.csv", (PHILLY_HEADER + "2017-10-09 07:01:56,1,1,1,caf\xe9\n").encode("latin-1"),
         2, "not UTF-8"),
    ],
)
def test_bad_trace_stops_the_sim_with_file_line_reason(tmp_path, name, content, line, reason):
    from typer.testing import CliRunner

    from stint.cli import app

    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    with pytest.raises(TraceError) as err:
        load(str(p))
    msg = str(err.value)
    assert msg.startswith(f"{p}:{line if line is not None else ''}") and reason in msg, msg
    out = tmp_path / "results"
    res = CliRunner().invoke(app, ["sim", "--trace", str(p), "--policy", "fifo", "--gpus", "8",
                                   "--out", str(out), "--no-plots"])
    shown = " ".join(res.output.split())  # the console wraps long lines
    assert res.exit_code == 2 and reason in shown and "Traceback" not in shown
    assert not (out / "summary.json").exists()
