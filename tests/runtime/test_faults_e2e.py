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
    (["--tick", "0"], "--tick: must be at least"),
    (["--grace", "-1"], "--grace: must be at least"),
    (["--policy", "no-such-policy"], "no-such-policy"),
    (["--db", "postgresql://127.0.0.1:1/none"], "cannot start"),
])
def test_start_up_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                                 needle: str) -> None:
    assert needle in _serve_fails("--data-dir", str(tmp_path / "d"), *args)


BAD_BODIES = [  # (raw JSON body of POST /v1/jobs, the field the 422 must name)
    ('{"command": ["true"], "priority": NaN}', "priority"),
    ('{"command": ["true"], "priority": Infinity}', "priority"),
    ('{"command": ["true"], "deadline_s": 1e400}', "deadline_s"),
    ('{"command": ["true"], "gpus": NaN}', "gpus"),
    ('{"command": ["\\ud800"]}', "command"),
    ('{"command": ["true"], "name": "a\\udfffb"}', "name"),
    ('{"command": ["true"], "cwd": "relative/dir"}', "cwd"),
    ('{"command": ["true"], "env": {"STINT_TOKEN": "x"}}', "env"),
    ('{"command": ["true"], "env": {"A": "\\ud800"}}', "env"),
]


def test_bad_input_is_a_422_naming_the_field(serve: ServeProc) -> None:
    c = serve.client().http
    for body, field in BAD_BODIES:
        r = c.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, (body, r.status_code, r.text)
        assert field in r.json()["detail"][0]["loc"], (body, r.json())
    r = c.get("/v1/jobs/1/logs", params={"offset": 2**62})
    assert r.status_code in (404, 422) and r.status_code < 500
    job = c.post("/v1/jobs", json={"command": ["true"]}).json()["id"]
    r = c.get(f"/v1/jobs/{job}/logs", params={"offset": 2**63})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "offset"]
    r = c.get(f"/v1/jobs/{job}/logs", params={"offset": 2**53})
    assert r.status_code == 200 and r.json()["text"] == ""
    r = c.post(f"/v1/jobs/{job}/migrate", content='{"node": "\\udc80"}',
               headers={"content-type": "application/json"})
    assert r.status_code in (409, 422)


def test_a_huge_body_is_refused_before_authentication(serve: ServeProc) -> None:
    url = f"{serve.url}/v1/jobs"
    r = httpx.post(url, content=b"x" * (5 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 413  # no token: the size is checked first

    def chunks() -> Iterator[bytes]:
        for _ in range(80):
            yield b"y" * (64 << 10)

    r = httpx.post(url, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_openapi_and_docs_of_the_served_app(serve: ServeProc) -> None:
    spec = httpx.get(f"{serve.url}/openapi.json")
    assert spec.status_code == 200
    assert "/v1/health/controller" in spec.json()["paths"]
    assert httpx.get(f"{serve.url}/docs").status_code == 200


def test_concurrent_token_creation_for_one_user(serve: ServeProc) -> None:
    from concurrent.futures import ThreadPoolExecutor

    c = serve.client()
    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: c.http.post("/v1/tokens", json={"user": "eve"})
                              .status_code, range(16)))
    assert set(codes) == {201}


def test_a_corrupted_store_refuses_to_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServeProc(data, f"sqlite:///{data / 'stint.db'}")
    first.start()
    c = first.client()
    for i in range(200):
        c.create_token(f"user{i}")
    first.stop()
    db = data / "stint.db"
    raw = bytearray(db.read_bytes())
    assert len(raw) > 3 * 4096
    raw[2 * 4096 : 2 * 4096 + 512] = b"\xff" * 512  # a page in the middle
    db.write_bytes(bytes(raw))
    assert "integrity check" in _serve_fails("--data-dir", str(data))


def _wait_exit(serve: ServeProc) -> str:
    assert serve.proc is not None
    serve.proc.wait(60)
    return (serve.data_dir.parent / "serve.log").read_text()


def test_sigterm_names_the_jobs_it_leaves_and_drain_checkpoints_them(db_url: str,
                                                                     tmp_path: Path) -> None:
    serve = ServeProc(tmp_path / "data", db_url)
    serve.start()
    out = tmp_path / "out"
    try:
        c = serve.client()
        job = c.submit(command=counter_cmd(30, out, "--hold"))["id"]
        log = serve.jobs_dir / str(job) / "log.txt"
        wait_for(lambda: log.exists() and "starts at step 0" in log.read_text(), 60, "start")
        assert serve.proc is not None
        serve.proc.terminate()  # SIGTERM: the job keeps running, and the log says so
        assert "still running, by design" in _wait_exit(serve)
        serve.start()  # re-adopts it
        assert serve.cli("drain").startswith(f"draining (jobs {job})")
        text = _wait_exit(serve)
        assert "drained: every job stopped" in text
        assert "checkpointed at step 30" in log.read_text()
        serve.start()  # the checkpoint is applied, the job resumes from it and finishes
        wait_for(lambda: "starts at step 30" in log.read_text(), 60, "the resume")
        (out / "release").touch()
        c = serve.client()
        wait_for(lambda: c.show(job)["state"] == "succeeded", 60, "success")
        assert json.loads((out / "result.json").read_text())["total"] == 30 * 31 // 2
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        r = subprocess.run([STINT, "serve", "--data-dir", str(tmp_path / "d"), "--port", port],
                           capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: stint serve cannot start: cannot listen on 127.0.0.1:{port}: "
        "Address already in use")
