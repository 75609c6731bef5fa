"""End to end with real processes on a real Ray cluster: ``stint serve --executor ray`` on a
2-node loopback cluster (``LoopbackRayCluster``), SQLite, the ``stint`` CLI.

Two jobs: a PyTorch job using the SDK (examples/mlp.py) is preempted mid-run and resumes from its
checkpoint to exactly the parameters of an uninterrupted run; a held counter job keeps running
while ``stint serve`` is SIGKILLed and restarted, and the new server re-adopts its Ray worker (same
attempt, same process) instead of relaunching it. Both finish exactly once with the transitions
in order. Every Ray process and worker is gone afterwards. SQLite only: the store's behaviour is
covered on both databases by the other tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rt_helpers import MLP, ServeProc, counter_cmd, final_digest, wait_for

from stint.runtime.executor.raycluster import LoopbackRayCluster
from stint.runtime.executor.shim import proc_start_ticks

MLP_STEPS = 30
COUNT = 20


def processes_mentioning(needle: str) -> list[int]:
    """Pids of live processes whose command line contains ``needle``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if needle.encode() in f.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def ray_serve(tmp_path: Path) -> Iterator[tuple[ServeProc, LoopbackRayCluster]]:
    """A 2-node x 2-slot loopback Ray cluster and ``stint serve --executor ray`` on it. Teardown
    stops the server, then every process of the cluster (by pid, with their descendants: the
    Ray actors' supervisors and the job workers), and checks that none is left."""
    cluster = LoopbackRayCluster()
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}",
                      "--executor", "ray", "--ray-address", cluster.address)
    serve.env = cluster.env()
    try:
        cluster.start(nodes=2, gpus_per_node=2)
        serve.start()
        yield serve, cluster
    finally:
        serve.stop()
        cluster.stop()
        left = processes_mentioning(cluster.temp_dir) + processes_mentioning(str(tmp_path))
        assert not left, f"processes left behind: {left}"


def show(serve: ServeProc, job: int) -> dict:
    with serve.client() as c:
        return c.show(job)


def log_of(serve: ServeProc, job: int) -> str:
    log = serve.jobs_dir / str(job) / "log.txt"
    return log.read_text() if log.exists() else ""


def worker_process(serve: ServeProc, job: int, attempt: int) -> tuple[int, int]:
    """Rank 0's worker process (pid, start time in ticks), as its supervisor recorded it."""
    path = serve.data_dir / "executor" / "jobs" / str(job) / str(attempt) / "rank-0.child"
    wait_for(lambda: path.exists() and path.read_text().strip(), 30, f"job {job}'s worker pid")
    rec = json.loads(path.read_text())
    return int(rec["pid"]), int(rec["start"])


def controller_steps(serve: ServeProc) -> int:
    try:
        r = httpx.get(f"{serve.url}/v1/health/controller", timeout=2)
    except httpx.HTTPError:
        return 0
    body = r.json()
    return int(body["steps"]) if body["status"] == "ok" else 0




@pytest.mark.slow
@pytest.mark.ray
def test_ray_preempt_resume_and_serve_restart_readopts(
        ray_serve: tuple[ServeProc, LoopbackRayCluster], tmp_path: Path) -> None:
    serve, _ = ray_serve
    reference = subprocess.Popen(  # runs meanwhile: the same script, never interrupted
        [sys.executable, MLP, "--steps", str(MLP_STEPS), "--ckpt-dir", str(tmp_path / "ref")],
        stdout=subprocess.PIPE, text=True)
    try:
        out = tmp_path / "counter"
        held = int(serve.cli("submit", "--name", "held", "--",
                             *counter_cmd(COUNT, out, "--hold")))
        # 0.3 s a step: the action lands before the job ends, even on a loaded machine
        mlp = int(serve.cli("submit", "--name", "mlp", "--", sys.executable, MLP, "--steps",
                            str(MLP_STEPS), "--sleep", "0.3", "--log-every", "5"))

        # 1. Preempt the SDK job mid-run; it checkpoints, is requeued and resumes.
        wait_for(lambda: "step 5 digest" in log_of(serve, mlp), 90, "the mlp job to train")
        serve.cli("preempt", str(mlp))
        wait_for(lambda: show(serve, mlp)["state"] in ("succeeded", "failed"), 120,
                 "the mlp job to end")

        # 2. SIGKILL the server while the held job runs; the restarted one re-adopts its worker.
        wait_for(lambda: "attempt 1 starts" in log_of(serve, held), 60, "the held job to start")
        pid, start = worker_process(serve, held, 1)
        serve.kill()
        serve.start()
        before = controller_steps(serve)
        wait_for(lambda: controller_steps(serve) >= before + 3, 30, "three controller steps")
        job = show(serve, held)
        assert (job["state"], job["attempt"]) == ("running", 1)  # adopted, not relaunched
        assert proc_start_ticks(pid) == start  # the very same worker process
        (out / "release").touch()
        wait_for(lambda: show(serve, held)["state"] in ("succeeded", "failed"), 60,
                 "the held job to end")
    finally:
        reference_out = reference.communicate(timeout=120)[0]
    assert reference.returncode == 0

    detail = json.loads(serve.cli("show", str(mlp), "--json"))
    assert detail["state"] == "succeeded", detail["reason"]
    assert [t["dst"] for t in detail["transitions"]] == [
        "queued", "admitted", "starting", "running", "checkpointing", "preempted", "resumed",
        "starting", "running", "succeeded"]
    mlp_log = log_of(serve, mlp)
    resumed = re.findall(r"stint: resumed \S+ at step (\d+)", mlp_log)
    assert len(resumed) == 1 and int(resumed[0]) > 0, mlp_log  # from its checkpoint, not step 0
    assert final_digest(mlp_log, MLP_STEPS) == final_digest(reference_out, MLP_STEPS)

    detail = json.loads(serve.cli("show", str(held), "--json"))
    assert detail["state"] == "succeeded", detail["reason"]
    assert [t["dst"] for t in detail["transitions"]] == [
        "queued", "admitted", "starting", "running", "succeeded"]
    for d in (detail,):
        times = [t["at"] for t in d["transitions"]]
        assert times == sorted(times)
    assert json.loads((out / "result.json").read_text())["total"] == COUNT * (COUNT + 1) // 2
    assert (out / "completions").read_text().count("\n") == 1  # finished exactly once
    assert log_of(serve, held).count("starts") == 1
