"""``stint sim --fleet``: the summary contract, the jobs files, and errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stint.cli import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.toml"


def test_fleet_sim_writes_figures_per_scheduler(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["sim", "--fleet", str(EXAMPLE), "--fleet-jobs", "600", "--policy", "fifo",
                                   "--out", str(tmp_path), "--format", "json"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert json.loads(res.stdout) == summary
    assert list(summary) == ["gain", "static", "least-loaded"]
    for name, s in summary.items():
        assert s["jobs"] == 600 and set(s["per_cluster"]) == {"e1", "e2", "w1"}
        assert set(s["tiers"]) == {"premium", "standard", "basic"}
        assert s["max_lost_s_per_failure"] <= s["checkpoint_interval_s"]
        lines = (tmp_path / name / "jobs.csv").read_text().splitlines()
        assert lines[0].startswith("job_id,tier,cluster") and len(lines) == 601
    assert summary["static"]["region_moves"] == 0  # static never leaves the submitter's region


def test_fleet_sim_on_a_trace_prints_a_table(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["sim", "--fleet", str(EXAMPLE), "--trace", "philly", "--limit", "200",
                                   "--global", "static", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "static" in res.output and "200 jobs on 192 GPUs in 3 clusters" in res.output


def test_fleet_sim_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[region.a.cluster.x]\nnodes = 0\ngpus_per_node = 8\n")
    cases = [
        (["--fleet", str(bad)], "bad.toml:2: region.a.cluster.x.nodes must be a positive integer"),
        (["--fleet", str(EXAMPLE), "--global", "oracle"], "unknown global scheduler 'oracle'"),
        (["--fleet", str(EXAMPLE), "--global-opt", "speed=1"], "bad option 'speed=1'"),
        (["--fleet", str(EXAMPLE), "--policy", "fifo,drf"], "one cluster policy"),
        (["--fleet", str(tmp_path / "none.toml")], "cannot read"),
    ]
    for args, message in cases:
        res = CliRunner().invoke(app, ["sim", *args, "--fleet-jobs", "10", "--out", str(tmp_path)])
        assert res.exit_code == 2, (args, res.output)
        assert message in " ".join(res.output.split()), (args, res.output)


def test_fleet_warm_starts_in_the_steady_state(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["sim", "--fleet", str(EXAMPLE), "--fleet-jobs", "300", "--fleet-warm",
                                   "--policy", "fifo", "--global", "gain", "--out", str(tmp_path),
                                   "--format", "json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["gain"]
    assert s["jobs"] == 300 and s["warmup_jobs"] > 0
    assert sum(t["jobs"] for t in s["tiers"].values()) == 300  # the warm jobs are not in the tiers
    rows = (tmp_path / "gain" / "jobs.csv").read_text().splitlines()
    assert len(rows) == 1 + 300 + s["warmup_jobs"] and rows[0].split(",")[-2] == "warmup"
