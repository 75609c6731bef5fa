"""Live, with real processes: ``stint serve --cluster`` gives the local executor typed virtual
nodes, ``stint nodes`` shows their types, and a job submitted with ``--gpu-type`` lands on its
type (and one limited to the type that is taken waits rather than spill onto another)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rt_helpers import ServeProc, counter_cmd, kill_leftover_workers, wait_for

CLUSTER = """\
[[group]]
gpu_type = "v100"
nodes = 1
gpus_per_node = 2

[[group]]
gpu_type = "k80"
nodes = 1
gpus_per_node = 2
"""


@pytest.fixture
def typed_serve(db_url: str, tmp_path: Path) -> Iterator[ServeProc]:
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    proc = ServeProc(tmp_path / "data", db_url, "--cluster", str(tmp_path / "cluster.toml"))
    proc.start()
    yield proc
    proc.stop()
    kill_leftover_workers(proc.data_dir)


def _show(serve: ServeProc, job: int) -> dict:  # type: ignore[type-arg]
    with serve.client() as c:
        return c.show(job)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_typed_job_lands_on_its_type(typed_serve: ServeProc, tmp_path: Path) -> None:
    serve = typed_serve
    nodes = json.loads(serve.cli("nodes", "--json"))
    assert [(n["name"], n["gpu_type"], n["gpus"]) for n in nodes] == [("v100-0", "v100", 2), ("k80-0", "k80", 2)]
    assert "k80" in serve.cli("nodes")
    # FIFO's best fit would put a one-GPU job first on v100-0: limited to k80, it goes there
    a = int(serve.cli("submit", "--gpu-type", "k80", "--", *counter_cmd(40, tmp_path / "a", "--hold")))
    wait_for(lambda: _show(serve, a)["state"] == "running", 60, "job a to run")
    assert _show(serve, a)["allocation"] == {"k80-0": 1}
    assert _show(serve, a)["gpu_types"] == ["k80"]
    # two GPUs of v100 or k80: only v100-0 holds two, so it goes there whatever the order
    b = int(serve.cli("submit", "--gpus", "2", "--gpu-type", "k80,v100", "--",
                      *counter_cmd(40, tmp_path / "b", "--hold")))
    wait_for(lambda: _show(serve, b)["state"] == "running", 60, "job b to run")
    assert _show(serve, b)["allocation"] == {"v100-0": 2}
    # limited to v100, which b holds: it waits, though a k80 GPU is free
    c = int(serve.cli("submit", "--gpu-type", "v100", "--", *counter_cmd(40, tmp_path / "c", "--hold")))
    wait_for(lambda: _show(serve, c)["state"] in ("queued", "admitted", "running"), 30, "job c to be seen")
    time.sleep(2.0)  # a few reconcile steps (0.1 s each)
    assert _show(serve, c)["state"] == "queued" and not _show(serve, c)["allocation"]
    for job in (a, b, c):
        serve.cli("cancel", str(job))
