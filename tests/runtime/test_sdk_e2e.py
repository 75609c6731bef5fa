"""End to end with a real PyTorch job using the SDK (examples/mlp.py) under ``stint serve``:
resized from 2 workers to 1 mid-run, it ends with exactly the parameters of an uninterrupted run.
SQLite only: the store's behaviour is covered on both databases by the other tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rt_helpers import MLP, ServeProc, final_digest, kill_leftover_workers, wait_for

STEPS = 30


@pytest.mark.slow
def test_resized_sdk_job_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    reference = subprocess.Popen(  # runs meanwhile: the same script, never interrupted
        [sys.executable, MLP, "--steps", str(STEPS), "--logical", "2",
         "--ckpt-dir", str(tmp_path / "ref")], stdout=subprocess.PIPE, text=True)
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}")
    serve.start()
    try:
        # 0.3 s a step: the action lands before the job ends, even on a loaded machine
        job = int(serve.cli("submit", "--gpus", "2", "--min-gpus", "1", "--", sys.executable, MLP,
                            "--steps", str(STEPS), "--sleep", "0.3", "--log-every", "5"))
        log = serve.jobs_dir / str(job) / "log.txt"
        wait_for(lambda: log.exists() and "step 5 digest" in log.read_text(), 120, "training")
        serve.cli("resize", str(job), "1")
        with serve.client() as c:
            wait_for(lambda: c.show(job)["state"] in ("succeeded", "failed"), 180, "the job to end")
            detail = c.show(job)
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
        reference_out = reference.communicate(timeout=120)[0]
    assert reference.returncode == 0
    assert detail["state"] == "succeeded", detail["reason"]
    path = [t["dst"] for t in detail["transitions"]]
    assert path[3:9] == ["running", "checkpointing", "preempted", "resizing", "starting", "running"], \
        [(t["dst"], t["reason"]) for t in detail["transitions"]]
    assert detail["allocation"] and sum(detail["allocation"].values()) == 1
    assert final_digest(log.read_text(), STEPS) == final_digest(reference_out, STEPS)
