"""One job's fault or one bad request stays its own: a real ``stint serve`` process."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rt_helpers import STINT, ServeProc, counter_cmd, kill_leftover_workers, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def serve(db_url: str, tmp_path: Path) -> Iterator[ServeProc]:
    proc = ServeProc(tmp_path / "data", db_url)
    proc.start()
    yield proc
    proc.stop()
    kill_leftover_workers(proc.data_dir)


def _finished(c: httpx.Client, job: int) -> dict[str, object] | None:
    row: dict[str, object] = c.get(f"/v1/jobs/{job}").json()
    return row if row["state"] in ("succeeded", "failed", "cancelled") else None


def test_unrunnable_jobs_fail_at_once_and_the_next_job_runs(serve: ServeProc,
                                                            tmp_path: Path) -> None:
    c = serve.client().http
    huge = ["/bin/echo", *["x" * 4000] * 600]  # 2.4 MB: over what the OS lets a program have
    r = c.post("/v1/jobs", json={"command": huge})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "command"]
    assert "bytes" in r.json()["detail"][0]["msg"]
    r = c.post("/v1/jobs", json={"command": ["true"], "env": {"BIG": "y" * 4000,
                                                             **{f"V{i}": "z" * 4000
                                                                for i in range(20)}}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "env"]

    missing = c.post("/v1/jobs", json={"command": ["/no/such/program"]}).json()["id"]
    exit127 = c.post("/v1/jobs", json={"command": ["sh", "-c", "exit 127"]}).json()["id"]
    out = tmp_path / "out"
    normal = c.post("/v1/jobs", json={"command": counter_cmd(5, out)}).json()["id"]
    rows = {j: wait_for(lambda j=j: _finished(c, j), 60, f"job {j} to end")
            for j in (missing, exit127, normal)}
    for j in (missing, exit127):
        row = rows[j]
        assert isinstance(row, dict)
        assert (row["state"], row["attempt"], row["failures"]) == ("failed", 1, 1)
        assert "cannot run, not retried" in str(row["reason"])
    assert "No such file or directory" in str(rows[missing]["reason"])  # type: ignore[index]
    assert rows[normal]["state"] == "succeeded"  # type: ignore[index]
    assert json.loads((out / "result.json").read_text())["total"] == 15
    health = c.get("/v1/health/controller").json()
    assert health["status"] == "ok" and health["failures"] == 0


def test_second_serve_on_the_same_store_exits_2_naming_the_holder(serve: ServeProc,
                                                                   tmp_path: Path) -> None:
    assert serve.proc is not None
    r = subprocess.run([STINT, "serve", "--data-dir", str(tmp_path / "other"), "--db",
                        serve.db_url, "--port", "0"], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: stint serve cannot start: another stint serve holds")
    assert f"pid={serve.proc.pid}" in last and "Traceback" not in r.stderr


def _serve_fails(*args: str) -> str:
    """Run ``stint serve ARGS`` expecting it to refuse: exit 2 and one line on stderr."""
    r = subprocess.run([STINT, "serve", "--port", "0", *args], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:") or "Traceback" in x]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_data_dir_never_serves_another_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServeProc(data, f"sqlite:///{data / 'stint.db'}")
    first.start()
    first.stop()
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert "belongs to store" in _serve_fails("--data-dir", str(data), "--db", other)
    (data / "stint.db").write_bytes(b"")  # a truncated store is a new, empty one
    for suffix in ("-wal", "-shm"):
        (data / f"stint.db{suffix}").unlink(missing_ok=True)
    token = (data / "admin.token").read_text()
    assert "belongs to store" in _serve_fails("--data-dir", str(data))
    assert (data / "admin.token").read_text() == token  # not rewritten


@pytest.mark.parametrize(("args", "needle"), [
    (["--tick", "0"], "--tick must be at least"),
    (["--grace", "-1"], "--grace must be at least"),
    (["--policy", "no-such-policy"], "no-such-policy"),
    (["--db", "postgresql://127.0.0.1:1/none"], "cannot start"),
])
def test_start_up_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                                 needle: str) -> None:
    assert needle in _serve_fails("--data-dir", str(tmp_path / "d"), *args)
