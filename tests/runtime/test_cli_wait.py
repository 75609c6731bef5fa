"""``stint logs -f`` and ``stint wait`` exit as the job ended (0 succeeded, 1 otherwise), as a
script chaining jobs needs; ``wait --timeout`` gives up with 2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from rt_helpers import STINT, ServeProc, kill_leftover_workers


def _run(serve: ServeProc, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STINT_SERVER": serve.url, "STINT_DATA_DIR": str(serve.data_dir)}
    env.pop("STINT_TOKEN", None)
    return subprocess.run([STINT, *args], capture_output=True, text=True, timeout=120, env=env,
                          check=False)


def test_logs_follow_and_wait_exit_with_the_jobs_outcome(tmp_path: Path) -> None:
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}", "--max-retries", "0")
    serve.start()
    try:
        ok = serve.cli("submit", "--", "sh", "-c", "echo fine").strip()
        bad = serve.cli("submit", "--", "sh", "-c", "echo broken; exit 3").strip()
        slow = serve.cli("submit", "--", "sleep", "30").strip()
        good, failed = _run(serve, "logs", ok, "-f"), _run(serve, "logs", bad, "-f")
        assert (good.returncode, good.stdout.strip()) == (0, "fine")
        assert failed.returncode == 1 and "broken" in failed.stdout
        assert f"job {bad} failed" in failed.stderr
        assert _run(serve, "wait", ok).returncode == 0 and _run(serve, "wait", bad).returncode == 1
        late = _run(serve, "wait", slow, "--timeout", "1")
        assert late.returncode == 2 and "still" in late.stderr
        serve.cli("cancel", slow)
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
