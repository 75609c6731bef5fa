"""A stint.torch.ps job under a real ``stint serve``: ``stint submit --ps 2`` starts two
parameter servers beside its first worker; resized from 2 workers to 1 mid-run, it ends with the
digest of a run at a fixed size (synchronous mode is bitwise across worker and PS counts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rt_helpers import ServeProc, final_digest, kill_leftover_workers, wait_for

ROOT = Path(__file__).resolve().parents[2]
PS_CNN = str(ROOT / "examples" / "ps_cnn.py")


@pytest.mark.slow
def test_ps_job_resized_under_serve_ends_with_the_fixed_size_digest(tmp_path: Path) -> None:
    steps = 30
    reference = subprocess.run(
        [sys.executable, "-m", "stint.torch.ps", "--workers", "1", "--ps", "1", "--logical", "2",
         PS_CNN, "--steps", str(steps)], capture_output=True, text=True, timeout=300,
        check=True).stdout
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'stint.db'}")
    serve.start()
    try:
        job = int(serve.cli("submit", "--gpus", "2", "--min-gpus", "1", "--max-gpus", "2",
                            "--logical-ranks", "2", "--ps", "2",
                            "--env", f"PYTHONPATH={ROOT / 'src'}",  # this tree's stint.torch
                            "--", sys.executable, PS_CNN,
                            "--steps", str(steps), "--sleep", "0.2", "--log-every", "5"))
        log_path = serve.jobs_dir / str(job) / "log.txt"
        wait_for(lambda: log_path.exists() and "step 5 digest" in log_path.read_text(), 180,
                 "training")
        serve.cli("resize", str(job), "1")
        with serve.client() as c:
            wait_for(lambda: c.show(job)["state"] in ("succeeded", "failed"), 300, "the job to end")
            detail = c.show(job)
        log = log_path.read_text()
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    assert detail["state"] == "succeeded", detail["reason"]
    assert detail["attempt"] >= 2  # it was resized: checkpointed and relaunched on 1 worker
    assert final_digest(log, steps) == final_digest(reference, steps)
