"""Crash test: SIGKILL ``stint serve`` again and again at different moments (during start-up and
recovery, while jobs start, run, checkpoint and finish), restart it, and check that every job
still completes exactly once with the right output and a lawful lifecycle in the store."""

from __future__ import annotations

import json
import random
import subprocess
import time
from itertools import pairwise
from pathlib import Path

import pytest
from rt_helpers import ServeProc, counter_cmd, kill_leftover_workers, wait_for

from stint.runtime.client import ApiError
from stint.runtime.states import JobState, allowed

STEPS = 50  # about 1 s of work per attempt
GPUS = [1, 2, 1, 1, 2, 1]  # 8 GPUs of work on a 4-GPU cluster: jobs queue behind each other


@pytest.mark.slow
def test_sigkill_loop_every_job_completes_exactly_once(db_url: str, tmp_path: Path) -> None:
    serve = ServeProc(tmp_path / "data", db_url)
    serve.start()
    rng = random.Random(4)
    try:
        with serve.client() as c:
            jobs = {c.submit(command=counter_cmd(STEPS, tmp_path / f"j{i}"), gpus=g)["id"]: i
                    for i, g in enumerate(GPUS)}
        for round_ in range(3):
            time.sleep(rng.uniform(0.0, 1.2))
            if round_ % 2 == 0:
                _preempt_one(serve)  # so that some kills land while a checkpoint is in flight
            serve.kill()
            if round_ % 2 == 1:  # die again during start-up, migrations or recovery
                serve.proc = subprocess.Popen(serve.proc.args, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(0.3, 1.5))
                serve.kill()
            serve.start()
        with serve.client() as c:
            wait_for(lambda: all(c.show(j)["state"] == "succeeded" for j in jobs), 120,
                     "every job to succeed")
            details = {j: c.show(j) for j in jobs}
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    for job, i in jobs.items():
        out = tmp_path / f"j{i}"
        assert (out / "completions").read_text().splitlines() == [str(details[job]["attempt"])]
        assert json.loads((out / "result.json").read_text())["total"] == STEPS * (STEPS + 1) // 2
        path = details[job]["transitions"]
        for before, after in pairwise(path):
            assert before["dst"] == after["src"], (job, before, after)
            assert JobState(after["dst"]) in allowed(JobState(before["dst"]))


def _preempt_one(serve: ServeProc) -> None:
    """Preempt a running one-worker job. (Not a two-worker one: the counter job's ranks count
    on their own, so a stop landing after rank 0 finished and before rank 1 did ends the attempt
    "checkpointed" with rank 0's completion already written; SDK ranks agree on every step
    boundary, so a real job cannot end that way.)"""
    with serve.client() as c:
        running = [j["id"] for j in c.jobs(["running"]) if j["gpus"] == 1]
        if running:
            try:
                c.act(running[0], "preempt")
            except ApiError:
                pass  # it finished in the meantime
