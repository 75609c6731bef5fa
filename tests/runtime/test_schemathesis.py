"""Schemathesis against a real ``stint serve`` process: every route of its own ``/openapi.json``
(health included), generated and mutated inputs, no 5xx and no traceback in the server's log.

Jobs are submitted as a user mapped to the ``nobody`` account (so needs root, as CI runs); the
admin's token is fuzzed on the routes that start nothing (tokens, nodes, health)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rt_helpers import ServeProc, kill_leftover_workers

SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))


def _nobody() -> bool:
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return True


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not _nobody(),
                       reason="needs root and a 'nobody' account (CI runs as root)"),
    pytest.mark.skipif(not Path(SCHEMATHESIS).exists(), reason="schemathesis not installed"),
]


def _fuzz(serve: ServeProc, token: str, *filters: str) -> subprocess.CompletedProcess[str]:
    # Run in the test's directory: schemathesis keeps a cache (.schemathesis/) where it runs.
    return subprocess.run(
        [SCHEMATHESIS, "run", f"{serve.url}/openapi.json", "-H", f"Authorization: Bearer {token}",
         "--checks", "not_a_server_error", "-n", "20", "--max-time", "25", "-w", "2",
         "--seed", "11", *filters],
        capture_output=True, text=True, timeout=300, check=False, cwd=serve.data_dir.parent)


def test_no_route_answers_5xx() -> None:
    base = Path(tempfile.mkdtemp(prefix="stint-fuzz-", dir="/tmp"))
    data = base / "data"
    serve = ServeProc(data, f"sqlite:///{data / 'stint.db'}")
    serve.start()
    try:
        user = serve.cli("user", "create", "fuzz", "--os-user", "nobody").strip()
        admin = (data / "admin.token").read_text().strip()
        runs = [_fuzz(serve, user),
                _fuzz(serve, admin, "--include-path-regex", "^/v1/(tokens|nodes|health)")]
        log = (base / "serve.log").read_text()
    finally:
        serve.stop()
        kill_leftover_workers(data)
        shutil.rmtree(base, ignore_errors=True)
    for r in runs:
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        assert " passed" in r.stdout and "failed" not in r.stdout.split("Test cases:")[-1]
    assert "Traceback" not in log and " 500 " not in log
