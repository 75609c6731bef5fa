"""Fixtures: an executor factory per backend, on one state directory per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from exec_helpers import MakeExecutor

from stint.runtime.executor.local import LocalExecutor
from stint.runtime.executor.supervised import SupervisedExecutor


@pytest.fixture(params=["local"])
def make_ex(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeExecutor]:
    """``make_ex()`` returns a new executor object on the test's state directory (2 nodes x 2).

    Calling it again models a restarted controller: the new object shares only the directory.
    At the end every worker still alive is killed, so no test leaks processes.
    """
    made: list[SupervisedExecutor] = []

    def make() -> SupervisedExecutor:
        ex = LocalExecutor(tmp_path / "state", nodes=2, gpus_per_node=2, term_grace_s=0.5)
        made.append(ex)
        return ex

    yield make
    if made:
        cleanup = make()
        for job in cleanup.running():
            cleanup.kill(job)
