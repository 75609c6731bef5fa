"""A fleet cluster on a Ray cluster through ``stint agent executor --executor ray``: one control
plane drives a Ray cluster through its agent (so it could drive several) beside a local
cluster; an SDK job trained on the Ray cluster moves to the local one and ends with the result of
an unmoved run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rt_helpers import MLP, STINT, ServeProc, final_digest, free_port, wait_for

from stint.runtime import fleet_secret
from stint.runtime.executor.raycluster import LoopbackRayCluster

STEPS = 30
JOB = ["--steps", str(STEPS), "--checkpoint-every", "5", "--log-every", "5"]




@pytest.mark.slow
@pytest.mark.ray
def test_a_ray_cluster_behind_an_agent_is_a_fleet_cluster(tmp_path: Path) -> None:
    reference = subprocess.run([sys.executable, MLP, *JOB, "--ckpt-dir", str(tmp_path / "ref")],
                               capture_output=True, text=True, check=True, timeout=300).stdout
    secret = tmp_path / "data" / fleet_secret.FILE_NAME
    fleet_secret.ensure(secret)
    port = free_port()
    (tmp_path / "fleet.toml").write_text(
        f'[region.r1.cluster.ray1]\nnodes = 1\ngpus_per_node = 1\nexecutor = "http://127.0.0.1:{port}"\n'
        '[region.r1.cluster.local1]\nnodes = 1\ngpus_per_node = 1\n')
    cluster = LoopbackRayCluster()
    agent: subprocess.Popen[bytes] | None = None
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}", "--fleet",
                      str(tmp_path / "fleet.toml"), "--global", "static")
    try:
        cluster.start(nodes=1, gpus_per_node=1)
        with (tmp_path / "agent.log").open("wb") as log:
            agent = subprocess.Popen(
                [STINT, "agent", "executor", "--executor", "ray", "--ray-address", cluster.address,
                 "--listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "ray-exec"),
                 "--secret-file", str(secret)], stdout=log, stderr=subprocess.STDOUT,
                env=cluster.env())
        wait_for(lambda: b"listening" in (tmp_path / "agent.log").read_bytes(), 60,
                 "the agent to listen")
        serve.start()
        with serve.client() as c:
            wait_for(lambda: c.nodes()[0]["state"] == "ready", 30, "the Ray cluster's node")
            job = int(serve.cli("submit", "--gpus", "1", "--", sys.executable, MLP, *JOB,
                                "--sleep", "0.2"))
            log_ray = tmp_path / "data-jobs" / "ray1" / str(job) / "log.txt"
            wait_for(lambda: log_ray.exists() and "step 5 digest" in log_ray.read_text(), 120,
                     "the job to train on the Ray cluster")
            assert c.show(job)["cluster"] == "ray1"
            serve.cli("migrate", str(job), "--to-cluster", "local1")
            wait_for(lambda: c.show(job)["state"] in ("succeeded", "failed"), 120, "the job to end")
            done = c.show(job)
    finally:
        serve.stop()
        if agent is not None:
            agent.terminate()
            agent.wait(30)
        cluster.stop()
    assert done["state"] == "succeeded" and done["cluster"] == "local1", done["reason"]
    assert done["copy_bytes"] > 0
    moved = (tmp_path / "data-jobs" / "local1" / str(job) / "log.txt").read_text()
    assert final_digest(moved, STEPS) == final_digest(reference, STEPS) and "resumed" in moved
