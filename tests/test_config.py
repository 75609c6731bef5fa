"""The config file of ``stint serve`` (and ``stint sim``): what ``--print-config`` prints loads
back to the same settings, flags given win over the file (and only those), and an error names
the file, the line and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from stint.cli import app
from stint.config import ConfigError, ServeConfig, dump, line_of, load
from stint.model.job import Tier

CONFIG = """\
# a comment
[executor]
nodes = 3

[controller]
tick_s = 0.2
max_retries = 5
stuck_step_s = 5
hang_s = 120
retry_backoff_s = 2.5

[policy]
name = "singularity"
[policy.options]
min_hold_s = 2

[tiers]
premium = 0.9
basic = "best-effort"

[limits]
max_gpus = 4
tiers = ["standard", "basic"]
job_memory_max = "16G"
job_disk_max = 1073741824
max_time_limit_s = 3600

[limits.users."ali.ce"]
tiers = ["premium", "standard", "basic"]
job_memory_max = "none"
log_max_bytes = "512M"

[fleet]
file = "fleet.toml"
global_policy = "least-loaded"
global_options = ["period_s=30"]
"""


def _print(tmp_path: Path, *args: str) -> str:
    r = CliRunner().invoke(app, ["serve", "--data-dir", str(tmp_path / "d"), "--print-config",
                                 *args])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_print_config_loads_back_to_the_same_settings(tmp_path: Path) -> None:
    conf = tmp_path / "serve.toml"
    conf.write_text(CONFIG)
    filed = load(conf)
    assert filed.executor.nodes == 3 and filed.controller.tick_s == 0.2
    assert filed.controller.stuck_step_s == 5.0 and ServeConfig().controller.stuck_step_s == 60
    assert filed.tiers.premium == 0.9 and filed.tiers.standard == 0.70 and filed.tiers.basic is None
    alice = filed.limits.of("ali.ce")
    assert alice.tiers == tuple(Tier) and alice.max_gpus == 4  # the rest from [limits]
    assert filed.limits.of("bob").tiers == (Tier.STANDARD, Tier.BASIC)
    bob = filed.limits.of("bob")
    assert (bob.job_memory_max, bob.job_disk_max, bob.max_time_limit_s) == (16 << 30, 1 << 30, 3600)
    assert (bob.job_pids_max, bob.log_max_bytes) == (4096, 1 << 30)  # the defaults
    assert (alice.job_memory_max, alice.log_max_bytes, alice.max_time_limit_s) == (
        None, 512 << 20, 3600)  # her "none" is no bound; the rest from [limits]
    c = filed.controller
    assert (c.hang_s, c.retry_backoff_s, c.retry_backoff_max_s) == (120, 2.5, 600)
    assert "singularity.premium=0.9" in filed.policy_options()  # the tiers reach the policy
    printed = _print(tmp_path, "--config", str(conf))
    again = tmp_path / "printed.toml"
    again.write_text(printed)
    back = load(again)
    assert back.executor == filed.executor and back.controller == filed.controller
    assert back.policy == filed.policy and back.tiers == filed.tiers
    assert back.limits == filed.limits and back.fleet == filed.fleet
    assert filed.fleet.global_options == ("period_s=30",)
    assert back.store.data_dir == (tmp_path / "d").resolve()
    assert _print(tmp_path, "--config", str(again)) == printed
    assert dump(load(_write(tmp_path, dump(ServeConfig())))) == dump(ServeConfig())


def test_flags_given_win_over_the_file_and_only_those(tmp_path: Path) -> None:
    conf = tmp_path / "serve.toml"
    conf.write_text(CONFIG)
    out = tmp_path / "out.toml"
    out.write_text(_print(tmp_path, "--config", str(conf), "--max-retries", "0", "--port", "9000",
                          "--policy-opt", "min_hold_s=7", "--max-gpus-per-user", "8"))
    got = load(out)
    assert (got.controller.max_retries, got.server.port) == (0, 9000)
    assert got.controller.tick_s == 0.2 and got.executor.nodes == 3  # not given: the file's
    assert got.policy.options == ("min_hold_s=7",)
    assert got.limits.default.max_gpus == 8 and got.limits.of("ali.ce").max_gpus == 4


@pytest.mark.parametrize(("text", "line", "words"), [
    ("[controller]\n\ntick_s = 0.001\n", 3, "controller.tick_s: must be at least 0.01"),
    ("[controller]\nstuck_step_s = 0\n", 2, "controller.stuck_step_s: must be above 0"),
    ("[limits.users.bob]\nmax_gpu = 3\n", 2, "unknown key limits.users.bob.max_gpu"),
    ("[limits]\ntiers = [\n  \"gold\",\n]\n", 2, "limits.tiers: 'gold' is not a tier"),
    ("[tiers]\npremium = 1.5\n", 2, "tiers.premium: must be a target in (0, 1]"),
    ("[server]\nport = \"x\"\n", 2, "server.port: must be an integer"),
    ("server.port = 70000\n", 1, "server.port: must be in 0..65535"),
    ("[policy.options]\npremium = 0.9\n", 2, "policy.options.premium: tier targets belong in"),
    ('[policy]\nname = "oasis"\n[policy.options]\nslot = 5\n', 4,
     "policy.options.slot: policy 'oasis' has no option 'slot'; valid: slot_s"),
    ('[policy]\nname = "nope"\n', 2, "policy.name: unknown policy 'nope'"),
    ("[fleet]\nglobal_options = [3]\n", 2, "fleet.global_options: must be a list of KEY=VALUE"),
    ('[limits]\njob_memory_max = "16Q"\n', 2, "limits.job_memory_max: '16Q' is not a size"),
    ("[limits]\njob_memory_max = 1000\n", 2, "limits.job_memory_max: must be at least 1M"),
    ('[limits.users.bob]\nmax_time_limit_s = "forever"\n', 2,
     'limits.users.bob.max_time_limit_s: must be a number or "none"'),
    ("[limits]\njob_pids_max = 0\n", 2, "limits.job_pids_max: must be at least 1, not 0"),
    ("[controller]\nretry_backoff_s = 30\nretry_backoff_max_s = 10\n", 3,
     "controller.retry_backoff_max_s: must be at least controller.retry_backoff_s"),
    ("[controller]\nhang_s = -1\n", 2, "controller.hang_s: must be at least 0"),
])
def test_errors_name_the_file_the_line_and_the_key(tmp_path: Path, text: str, line: int,
                                                   words: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}:{line}: ") and words in str(err.value)
    r = CliRunner().invoke(app, ["serve", "--config", str(path), "--data-dir",
                                 str(tmp_path / "d")])
    assert r.exit_code == 2 and f"{path}:{line}: " in r.output and "Traceback" not in r.output
    assert not (tmp_path / "d").exists()


def test_a_flag_out_of_range_is_named_as_the_flag(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["serve", "--tick", "0", "--print-config"])
    assert r.exit_code == 2 and "--tick: must be at least 0.01" in r.output


def test_line_of_reads_headers_dotted_and_quoted_keys() -> None:
    text = 'a.b = 1\n[t."x.y"]\nk = 2\n[t.z]  # c\n"q" = 3\n'
    assert line_of(text, ("a", "b")) == 1
    assert line_of(text, ("t", "x.y", "k")) == 3
    assert line_of(text, ("t", "x.y", "nope")) == 2  # the table's header
    assert line_of(text, ("t", "z", "q")) == 5
    assert line_of(text, ("other",)) is None


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_tier_targets_reach_only_the_policies_that_take_them() -> None:
    from stint.model.sla import SlaTargets
    from stint.policies.registry import make_with_options, tier_options
    from stint.policies.singularity import Singularity

    opts = tier_options(("fifo", "singularity"), SlaTargets(0.9, 0.5, None))
    assert opts == ("singularity.premium=0.9", "singularity.standard=0.5", "singularity.basic=none")
    policy = make_with_options("singularity", opts)
    assert isinstance(policy, Singularity) and policy.sla == SlaTargets(0.9, 0.5, None)
    make_with_options("fifo", opts)  # another policy's keys are not its own


def test_the_jobs_port_range_loads_prints_back_and_a_bad_one_is_named(tmp_path: Path) -> None:
    conf = tmp_path / "serve.toml"
    conf.write_text('[executor]\nports = "29500-29600"\n')
    cfg = load(conf)
    assert (cfg.executor.ports, len(cfg.executor.port_range() or ())) == ("29500-29600", 101)
    assert 'ports = "29500-29600"' in _print(tmp_path, "--config", str(conf))
    assert "# ports: not set (any free port)" in _print(tmp_path)
    conf.write_text('[executor]\nports = "29600-29500"\n')
    with pytest.raises(ConfigError, match=r"serve.toml:2: executor.ports: port range 29600-29500: "
                                          r"the first port is above the last"):
        load(conf)
    r = CliRunner().invoke(app, ["serve", "--job-ports", "29500:29600", "--print-config"])
    assert r.exit_code == 2 and "--job-ports: port range '29500:29600': expected FIRST-LAST" in r.output
