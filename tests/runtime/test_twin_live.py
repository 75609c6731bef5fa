"""The twin measured on real processes: 8 SDK jobs (examples/mlp.py) under ``stint serve`` with
FIFO, then ``stint replay --format json``: the simulator, given the measured costs and step
times, makes the same decisions in the same order and its mean JCT is within 5 % of the live one.
SQLite only (the store's behaviour is covered on both databases by the other tests)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rt_helpers import MLP, STINT, ServeProc, kill_leftover_workers, wait_for

# (seconds after the first submission, GPUs, steps): a queue forms on the 2 x 2 slots
JOBS = [(0, 1, 40), (1, 2, 30), (2, 1, 50), (3, 1, 30), (5, 2, 40), (7, 1, 30), (9, 1, 40),
        (11, 2, 30)]
SLEEP_S = 0.3  # a step's time: the jobs are short, the host's load matters little


@pytest.mark.slow
def test_replay_of_a_live_fifo_run_makes_the_same_decisions(tmp_path: Path) -> None:
    serve = ServeProc(tmp_path / "data", f"sqlite:///{tmp_path / 'data' / 'stint.db'}")
    serve.start()
    try:
        with serve.client() as c:
            t0 = time.monotonic()
            for at, gpus, steps in JOBS:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                c.submit(command=[sys.executable, MLP, "--steps", str(steps), "--sleep",
                                  str(SLEEP_S)], gpus=gpus, total_steps=steps,
                         est_s=steps * SLEEP_S + 5)
            wait_for(lambda: all(j["state"] in ("succeeded", "failed") for j in c.jobs()), 400,
                     "the jobs to end", every=1.0)
            states = {j["id"]: (j["state"], j["reason"]) for j in c.jobs()}
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    assert all(s == "succeeded" for s, _ in states.values()), states
    out = subprocess.run([STINT, "replay", "--data-dir", str(serve.data_dir), "--format", "json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    totals = got["totals"]
    (tmp_path.parent / "twin-live-fifo.json").write_text(out.stdout)  # for a look after a failure
    assert got["policy"] == "fifo"
    assert totals["measured_lengths"] == len(JOBS)
    assert got["costs"]["samples"]["start"] == len(JOBS)
    assert totals["decisions_identical"], totals["first_difference"]
    assert abs(totals["mean_jct_deviation_pct"]) <= 5.0, totals
