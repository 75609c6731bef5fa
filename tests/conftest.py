"""Fixtures of the tests that use a store: SQLite and PostgreSQL (one schema per
test, dropped afterwards)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stint.runtime.store import Store

PG_BASE = os.environ.get("STINT_TEST_PG", "postgresql+psycopg://127.0.0.1:5432/test")


def _pg_reachable() -> str | None:
    import psycopg

    try:
        psycopg.connect(PG_BASE.replace("+psycopg", ""), connect_timeout=3).close()
        return None
    except (psycopg.Error, OSError) as exc:
        return str(exc)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``ray`` share one xdist worker (``--dist loadgroup``), so the session's Ray
    cluster starts once and two clusters never compete for the two cores."""
    for item in items:
        if item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for one test: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'stint.db'}"
        return
    problem = _pg_reachable()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL at {PG_BASE} is unreachable in CI: {problem}")
        pytest.skip(f"no PostgreSQL at {PG_BASE}: {problem}")
    import psycopg

    schema = f"stint_test_{uuid.uuid4().hex[:12]}"
    plain = PG_BASE.replace("+psycopg", "")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_BASE}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_job_bounds() -> Iterator[None]:
    """At the end, remove what tests that kill a control plane or a supervisor on purpose leave
    of their jobs' bounds: empty stint cgroups and stint network namespaces nothing runs in
    (never one in use: other test workers may still be running theirs)."""
    yield
    if os.geteuid() != 0:
        return
    import subprocess

    from stint.runtime.executor import cgroup, netns

    host = cgroup.detect()
    if host.kind != "none":
        cgroup.sweep(host, lambda _name: False)  # (only empty ones are removed)
    for name in netns.names("stint-"):
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True,
                              check=False, timeout=10).stdout.split()
        if not pids:
            netns.delete(name)


@pytest.fixture
def new_account() -> Iterator[Callable[[], str]]:
    """``new_account()`` makes a fresh OS account (own group, no home) and returns its name;
    every one made is deleted at the end, its processes killed first (root only)."""
    import subprocess

    made: list[str] = []

    def make() -> str:
        name = f"stint{uuid.uuid4().hex[:8]}"
        subprocess.run(["useradd", "-M", "-U", "-s", "/bin/sh", name], check=True)
        made.append(name)
        return name

    try:
        yield make
    finally:
        for name in made:
            subprocess.run(["pkill", "-KILL", "-u", name], check=False)
            subprocess.run(["userdel", name], check=False)


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every account can traverse (pytest's tmp_path is under a 0700 directory)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="stint-accounts-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
