"""A real ``stint serve`` per test, on the test's database (SQLite, or PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rt_helpers import ServeProc, kill_leftover_workers


@pytest.fixture
def serve(db_url: str, tmp_path: Path) -> Iterator[ServeProc]:
    proc = ServeProc(tmp_path / "data", db_url)
    proc.start()
    yield proc
    proc.stop()
    kill_leftover_workers(proc.data_dir)
