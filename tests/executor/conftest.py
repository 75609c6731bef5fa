"""Fixtures: an executor factory per backend, on one state directory per test.

The Ray backend runs against a real 2-node cluster on 127.0.0.1 (two raylets, custom resources
``stint_node_node-0`` / ``stint_node_node-1``), started once for the session and stopped by pid.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from exec_helpers import MakeExecutor

from stint.runtime.executor.local import LocalExecutor
from stint.runtime.executor.raycluster import LoopbackRayCluster
from stint.runtime.executor.supervised import SupervisedExecutor


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[LoopbackRayCluster]:
    cluster = LoopbackRayCluster()
    os.environ.update(cluster.client_env())  # before this process imports Ray
    try:
        cluster.start(nodes=2, gpus_per_node=2, wait=False)
        import ray

        ray.init(address=cluster.address, namespace="stint", logging_level="ERROR")
        deadline = time.monotonic() + 60
        while sum(1 for n in ray.nodes() if n["Alive"]) < 2:
            assert time.monotonic() < deadline, f"Ray nodes did not come up: {ray.nodes()}"
            time.sleep(0.2)
        yield cluster
    finally:
        try:
            import ray

            ray.shutdown()
        finally:
            cluster.stop()


@pytest.fixture(params=["local", pytest.param("ray", marks=[pytest.mark.slow, pytest.mark.ray])])  # Ray: a cluster
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_ex(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeExecutor]:
    """``make_ex()`` returns a new executor object on the test's state directory (2 nodes x 2).

    Calling it again models a restarted controller: the new object shares only the directory
    (and, for Ray, the cluster). At the end every worker still alive is killed.
    """
    made: list[SupervisedExecutor] = []
    cluster = request.getfixturevalue("ray_cluster") if backend == "ray" else None

    def make() -> SupervisedExecutor:
        ex: SupervisedExecutor
        if cluster is None:
            ex = LocalExecutor(tmp_path / "state", nodes=2, gpus_per_node=2, term_grace_s=0.5)
        else:
            from stint.runtime.executor.ray import RayExecutor

            ex = RayExecutor(tmp_path / "state", cluster.address, term_grace_s=0.5)
        made.append(ex)
        return ex

    yield make
    if made:
        cleanup = make()
        for job in cleanup.running():
            cleanup.kill(job)
        for ex in made:
            ex.close()
