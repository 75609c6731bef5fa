"""A stint.torch job asked to stop after its training loop ended: it ends as succeeded, once."""

from __future__ import annotations

from pathlib import Path

import pytest
from exec_helpers import PY, MakeExecutor, wait_exit, wait_for

from stint.runtime.executor import Outcome, WorkerLaunch

SRC = Path(__file__).resolve().parents[2] / "src"

# Two workers, L = 2: four steps, then "<rank>.loop-done" in the checkpoint directory; the
# epilogue waits for the stop request (its stop file, beside the signal), then prints once.
AFTER_LOOP = """
import stint.torch as stint
import os, pathlib, time
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
job = stint.init(model=model, optimizer=opt)
for step in job.steps(4):
    opt.zero_grad()
    for lr in job.logical_ranks():
        model(torch.full((3, 4), float(lr))).sum().backward()
    opt.step()
d = pathlib.Path(os.environ["STINT_CKPT_DIR"])
(d / (os.environ["RANK"] + ".loop-done")).touch()
stop = pathlib.Path(os.environ["STINT_STOP_FILE"])
deadline = time.monotonic() + 60
while not stop.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1.0)  # the signal, sent beside the stop file, has landed by now
print(f"epilogue rank {os.environ['RANK']} step {job.step}", flush=True)
"""


def launches(tmp: Path, job: str) -> list[WorkerLaunch]:
    return [
        WorkerLaunch(job_id=job, attempt=0, rank=r, world_size=2, logical_world_size=2, node="node-0",
                     slots=(r,), command=[PY, "-c", AFTER_LOOP], ckpt_dir=str(tmp / "ckpt" / job),
                     log_path=str(tmp / "logs" / f"{job}.log"), env={"PYTHONPATH": str(SRC)})
        for r in range(2)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local"])
def test_a_stop_after_the_training_loop_ends_the_job_as_succeeded_with_one_epilogue(
    make_ex: MakeExecutor, tmp_path: Path
):
    ex = make_ex()
    ex.launch(launches(tmp_path, "end"))
    ckpt = tmp_path / "ckpt" / "end"
    wait_for(lambda: all((ckpt / f"{r}.loop-done").exists() for r in range(2)), 180, "the loop's end")
    ex.request_stop("end", grace_s=60)
    e = wait_exit(ex, "end", timeout=120)
    log = (tmp_path / "logs" / "end.log").read_text()
    assert (e.outcome, dict(e.exit_codes)) == (Outcome.SUCCEEDED, {0: 0, 1: 0}), log
    assert log.count("epilogue rank 0 step 4") == 1 and log.count("epilogue rank 1 step 4") == 1, log
    assert "stop requested after the training loop ended: the job finishes" in log
