"""The ``stint sim`` contract: summary.json keys, per-policy jobs.csv, plots, errors."""

import json

import pytest
from typer.testing import CliRunner

from stint.cli import app

CONTRACT = {
    "jobs", "completed", "avg_jct_s", "p99_jct_s", "makespan_s", "gpu_utilization",
    "total_utility", "preemptions", "policy_latency_ms_p99", "wall_s", "cost_model", "job_model", "batch",
}


@pytest.mark.slow
def test_sim_writes_the_contract(tmp_path):
    out = tmp_path / "results"
    res = CliRunner().invoke(
        app,
        ["sim", "--trace", "philly", "--policy", "fifo,srtf,drf,tiresias", "--gpus", "64",
         "--limit", "400", "--out", str(out), "--format", "json", "--plots"],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads(res.stdout) == summary
    assert list(summary) == ["fifo", "srtf", "drf", "tiresias"]
    for policy, s in summary.items():
        assert CONTRACT <= set(s), CONTRACT - set(s)
        assert s["jobs"] == 400 and s["completed"] == 400
        lines = (out / policy / "jobs.csv").read_text().splitlines()
        assert lines[0].startswith("job_id,arrival_s") and len(lines) == 401
    assert (out / "jct_cdf.png").stat().st_size > 1000
    assert (out / "over_time.png").stat().st_size > 1000
    assert (out / "tiers.png").stat().st_size > 1000  # attainment and JCT per tier
    assert not list(out.glob(".partial-*"))
    res = CliRunner().invoke(app, ["sim", "--trace", "philly", "--policy", "fifo", "--gpus", "64", "--limit", "50",
                                   "--out", str(tmp_path / "bare"), "--format", "json"])
    assert res.exit_code == 0 and not list((tmp_path / "bare").glob("*.png"))  # plots only when asked


def test_sim_table_output_on_pollux(tmp_path):
    res = CliRunner().invoke(
        app, ["sim", "--trace", "pollux:6", "--policy", "fifo", "--nodes", "16", "--gpus-per-node", "4",
              "--limit", "20", "--out", str(tmp_path), "--no-plots"],
    )
    assert res.exit_code == 0, res.output
    assert "pollux:6" in res.stdout and "fifo" in res.stdout
    assert "job model: pollux-progress; costs: pollux (start 30 s" in res.stdout and "fifo fixed" in res.stdout


def test_malformed_trace_fails_without_results(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,x,1,1,a\n")
    out = tmp_path / "results"
    res = CliRunner().invoke(app, ["sim", "--trace", str(trace), "--out", str(out)])
    assert res.exit_code == 2
    assert f"{trace}:2:" in res.output and "'duration' is not a float" in res.output
    assert not (out / "summary.json").exists()


def test_unknown_policy_lists_valid_ones(tmp_path):
    res = CliRunner().invoke(app, ["sim", "--policy", "fifo,nope", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "unknown policy 'nope'" in res.output and "tiresias" in res.output
    assert not (tmp_path / "summary.json").exists()


def _sim(tmp_path, *args):
    return CliRunner().invoke(app, ["sim", "--trace", "philly", "--gpus", "64", "--limit", "300",
                                    "--out", str(tmp_path / "r"), "--no-plots", "--format",
                                    "json", *args])


@pytest.mark.slow
def test_policy_options_from_flags_and_a_config_file_are_the_same(tmp_path):
    """``--policy-opt`` and ``[policy.options]`` build the same policy (flags win over the
    file); a different threshold changes Tiresias' schedule, so the option really arrives."""
    flags = _sim(tmp_path, "--policy", "tiresias", "--policy-opt", "thresholds_gpu_s=600",
                 "--policy-opt", "tick_s=30")
    assert flags.exit_code == 0, flags.output
    conf = tmp_path / "stint.toml"
    conf.write_text('[policy]\nname = "tiresias"\n[policy.options]\nthresholds_gpu_s = [600]\n'
                    'tick_s = 5\n')
    filed = _sim(tmp_path, "--config", str(conf), "--policy-opt", "tick_s=30")
    assert filed.exit_code == 0, filed.output
    default = _sim(tmp_path, "--policy", "tiresias")
    a, b, c = (json.loads(r.stdout)["tiresias"] for r in (flags, filed, default))
    assert a["avg_jct_s"] == b["avg_jct_s"] and a["preemptions"] == b["preemptions"]
    assert a["preemptions"] != c["preemptions"]


def test_bad_policy_options_name_the_key_and_the_valid_ones(tmp_path):
    res = _sim(tmp_path, "--policy", "tiresias", "--policy-opt", "threshold=5")
    assert res.exit_code == 2 and "no option 'threshold'" in res.output
    assert "thresholds_gpu_s" in res.output
    res = _sim(tmp_path, "--policy", "tiresias", "--policy-opt", "tick_s=soon")
    assert res.exit_code == 2 and "'soon' is not a float" in res.output
    conf = tmp_path / "bad.toml"
    conf.write_text('[policy]\nname = "fifo"\nfast = true\n')
    res = _sim(tmp_path, "--config", str(conf))
    assert res.exit_code == 2 and "unknown key policy.fast" in res.output
    conf.write_text('[policy\n')
    res = _sim(tmp_path, "--config", str(conf))
    assert res.exit_code == 2 and "line 1" in res.output
    assert not (tmp_path / "r" / "summary.json").exists()


def test_sim_imports_only_what_the_run_uses(tmp_path):
    """`stint sim` with Tiresias on a Pollux trace (the profile model, the table, no plots)
    imports neither Typer, Rich, NumPy, SciPy, matplotlib nor the runtime: its start-up is the
    whole cost of a small simulation."""
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['stint', 'sim', '--trace', 'pollux:6', '--policy', 'tiresias', "
            f"'--limit', '30', '--out', {str(tmp_path)!r}]\n"
            "from stint.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "heavy = ('typer', 'rich', 'numpy', 'scipy', 'matplotlib', 'stint.runtime', 'stint.runtime.cli')\n"
            "print('LOADED', [m for m in heavy if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pollux:6: 30 jobs" in out
    assert "LOADED []" in out, out
