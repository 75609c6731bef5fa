"""The CLI against a real ``stint serve`` started from a config file: ``stint logs -f`` and
``stint wait`` exit as the job ended (0 succeeded, 1 otherwise; ``wait --timeout`` gives up with
2) and the log marks attempts and ranks; a flag given wins over the file; a tier over a user's
limit is refused; ``stint jobs`` columns, ``--wide``, ``--user``, ``--state``, ``--limit``; serve's
log says where it listens and logs each decision and enacted action."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from rt_helpers import STINT, ServeProc, kill_leftover_workers, wait_for

CONFIG = """\
[server]
log_level = "info"

[controller]
max_retries = 5          # the flag --max-retries 0 wins
slow_step_s = 0.000001   # every step that does something is "slow"

[limits]
tiers = ["standard", "basic"]

[limits.users.admin]
tiers = ["premium", "standard", "basic"]
"""


def _run(serve: ServeProc, *args: str, token: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STINT_SERVER": serve.url, "STINT_DATA_DIR": str(serve.data_dir)}
    env.pop("STINT_TOKEN", None)
    if token:
        env["STINT_TOKEN"] = token
    return subprocess.run([STINT, *args], capture_output=True, text=True, timeout=120, env=env,
                          check=False)


@pytest.mark.slow
def test_logs_follow_and_wait_exit_with_the_jobs_outcome(tmp_path: Path) -> None:
    conf = tmp_path / "serve.toml"
    conf.write_text(CONFIG)
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}", "--config",
                      str(conf), "--max-retries", "0")
    serve.start()
    try:
        ok = serve.cli("submit", "--", "sh", "-c", "echo fine").strip()
        bad = serve.cli("submit", "--", "sh", "-c", "echo broken; exit 3").strip()
        slow = serve.cli("submit", "--tier", "premium", "--", "sleep", "600").strip()
        good, failed = _run(serve, "logs", ok, "-f"), _run(serve, "logs", bad, "-f")
        assert (good.returncode, good.stdout.strip()) == (0, "[attempt 1 rank 0] fine")
        assert failed.returncode == 1 and "[attempt 1 rank 0] broken" in failed.stdout
        assert f"job {bad} failed" in failed.stderr and "after 0 retries" in failed.stderr
        assert _run(serve, "wait", ok).returncode == 0 and _run(serve, "wait", bad).returncode == 1
        late = _run(serve, "wait", slow, "--timeout", "1")
        assert late.returncode == 2 and "still" in late.stderr

        bob = serve.cli("user", "create", "bob", "--os-user", "nobody").strip()
        refused = _run(serve, "submit", "--tier", "premium", "--", "true", token=bob)
        assert refused.returncode == 1 and "HTTP 403" in refused.stderr
        assert "tier premium" in refused.stderr and "limits.tiers" in refused.stderr
        other = _run(serve, "jobs", "--user", "admin", token=bob)
        assert other.returncode == 1 and "only an admin" in other.stderr
        assert _run(serve, "jobs", token=bob).stdout.splitlines()[1:] == []

        big = serve.cli("submit", "--gpus", "4", "--", "true").strip()  # 3 of 4 GPUs free
        wait_for(lambda: json.loads(serve.cli("show", big, "--json"))["queue_position"] == 1, 60,
                 "the forecast to place the 4-GPU job first in the queue")
        rows = _table(serve.cli("jobs", "--wide"))
        assert list(rows[0]) == ["ID", "NAME", "USER", "STATE", "TIER", "WORKERS", "PROGRESS",
                                 "AGE", "WAIT", "POS", "EST START", "NODES", "PRIORITY", "SLA",
                                 "EST FINISH", "ATTEMPT", "PREEMPTS", "CKPT", "REASON"]
        by_id = {r["ID"]: r for r in rows[1:]}
        assert by_id[ok]["STATE"] == "succeeded" and by_id[ok]["WORKERS"] == "-/1"
        assert by_id[ok]["NODES"] == "-"  # a finished job shows no placement
        assert (by_id[big]["STATE"], by_id[big]["POS"], by_id[ok]["POS"]) == ("queued", "1", "-")
        assert by_id[slow]["STATE"] == "running" and by_id[slow]["WORKERS"] == "1/1"
        assert by_id[slow]["NODES"].startswith("node-") and by_id[slow]["TIER"] == "premium"
        assert [r["ID"] for r in _table(serve.cli("jobs", "--state", "failed"))[1:]] == [bad]
        assert [r["ID"] for r in _table(serve.cli("jobs", "--limit", "1"))[1:]] == [big]
        assert [r["ID"] for r in _table(serve.cli("jobs", "--user", "bob"))[1:]] == []
        shown = _fields(serve.cli("show", big))
        assert re.fullmatch(r"in \w+ \(\w+-\w+\) \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)",
                            shown["est_start_at"])  # relative, its band, then the clock time
        assert shown["allocation"] == "-" and shown["first_start_at"] == "-"
        done = _fields(serve.cli("show", ok))
        assert done["est_start_at"] == done["est_finish_at"] == "-"  # no forecast once it ended
        assert done["finished_at"].endswith(" ago)") and done["command"] == "sh -c 'echo fine'"
        serve.cli("cancel", big)
        serve.cli("cancel", slow)
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    log = (tmp_path / "serve.log").read_text()
    assert f"listening on {serve.url}" in log and f"stint jobs --server {serve.url}" in log
    assert f"decision: policy fifo: start job {ok}: nothing -> node-" in log
    assert f"enacted: job {ok} attempt 1 launched: 1 worker(s) on node-" in log
    assert f"enacted: job {slow} killed" in log and f"job {bad}: running -> failed" in log
    assert "WARNING slow controller step" in log and "threshold 1e-06 s" in log
    assert "alembic" not in log  # its INFO lines only at --log-level debug


def _fields(text: str) -> dict[str, str]:
    """``stint show`` output's ``key: value`` lines (before the transitions table)."""
    pairs = (line.split(": ", 1) for line in text.split("+SECONDS")[0].splitlines() if ": " in line)
    return {k.strip(): v for k, v in pairs}


def _table(text: str) -> list[dict[str, str]]:
    """``stint jobs`` output as rows of header -> cell (cells split at the header's columns)."""
    lines = text.splitlines()
    head = lines[0]
    names = [n for n in head.split("  ") if n.strip()]
    starts = [head.index(n) for n in (x.strip() for x in names)]
    bounds = [*starts[1:], None]
    rows = [{n.strip(): n.strip() for n in names}]
    for line in lines[1:]:
        rows.append({n.strip(): line[a:b].strip() for n, a, b in zip(names, starts, bounds)})
    return rows
