"""A real ``stint serve`` per test, on the test's database (SQLite, or PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rt_helpers import Harness, ServeProc, kill_leftover_workers, make_controller, wait_for

from stint.runtime.store import Store


@pytest.fixture
def serve(db_url: str, tmp_path: Path) -> Iterator[ServeProc]:
    proc = ServeProc(tmp_path / "data", db_url)
    proc.start()
    yield proc
    proc.stop()
    kill_leftover_workers(proc.data_dir)


@pytest.fixture
def h(store: Store, tmp_path: Path) -> Iterator[Harness]:
    """A controller stepped by hand over a real LocalExecutor, and a user (alice) to submit."""
    token = store.create_token("alice", time.time())
    caller = store.caller_for_token(token)
    assert caller is not None
    harness = Harness(store, tmp_path, make_controller(store, tmp_path), caller)
    yield harness
    ex = harness.ctl.executor
    for jid in ex.running():
        ex.kill(jid)
    wait_for(lambda: not ex.running(), 10, "workers to exit")
