"""The executor driving a real PyTorch job that uses stint.torch: preempt, resume, same result."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from exec_helpers import PY, MakeExecutor, wait_exit, wait_for

from stint.runtime.executor import Outcome, WorkerLaunch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def mlp_job(tmp: Path, job: str, attempt: int, slot: int) -> list[WorkerLaunch]:
    cmd = [PY, str(EXAMPLES / "mlp.py"), "--steps", "60", "--sleep", "0.05", "--log-every", "10"]
    return [
        WorkerLaunch(
            job_id=job,
            attempt=attempt,
            rank=0,
            world_size=1,
            logical_world_size=2,
            node="node-0",
            slots=(slot,),
            command=cmd,
            ckpt_dir=str(tmp / "ckpt" / job),
            log_path=str(tmp / "logs" / f"{job}.log"),
        )
    ]


def final_digest(log: Path) -> str:
    found = re.findall(r"^\[attempt \d+ rank 0\] done step 60 digest (\S+)$", log.read_text(),
                       re.MULTILINE)
    assert len(found) == 1, log.read_text()
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local"])
def test_preempted_sdk_job_checkpoints_and_resumes_to_the_same_result(
    make_ex: MakeExecutor, tmp_path: Path
):
    ex = make_ex()
    ex.launch(mlp_job(tmp_path, "ref", 0, slot=1))  # uninterrupted reference, side by side
    ex.launch(mlp_job(tmp_path, "pre", 0, slot=0))
    log = tmp_path / "logs/pre.log"
    wait_for(lambda: log.exists() and "step 20 digest" in log.read_text(), 120, "step 20")
    ex.request_stop("pre", grace_s=60)
    e = wait_exit(ex, "pre", timeout=120)
    assert (e.outcome, dict(e.exit_codes)) == (Outcome.CHECKPOINTED, {0: 75})
    assert "done step" not in log.read_text()
    ex.launch(mlp_job(tmp_path, "pre", 1, slot=0))
    assert wait_exit(ex, "pre", timeout=120).outcome is Outcome.SUCCEEDED
    assert wait_exit(ex, "ref", timeout=120).outcome is Outcome.SUCCEEDED
    assert final_digest(log) == final_digest(tmp_path / "logs/ref.log")
