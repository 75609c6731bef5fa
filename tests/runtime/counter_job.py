"""A tiny resumable job for the control-plane tests (no torch, so it starts fast).

Usage: counter_job.py STEPS OUT_DIR [--fail-first N] [--hold]
Counts to STEPS, adding the step number to a running total; on SIGUSR1 it saves (step, total) to
$STINT_CKPT_DIR at the next step boundary and exits 75; it resumes from that checkpoint. With
--hold it waits after the last step until OUT_DIR/release exists (still answering SIGUSR1). Rank 0
then appends one line to OUT_DIR/completions and writes OUT_DIR/result.json. --fail-first N makes
the first N attempts die with exit 3 after one step (worker failure).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

stop = False


def _on_usr1(_sig: int, _frame: object) -> None:
    global stop
    stop = True


def main() -> int:
    signal.signal(signal.SIGUSR1, _on_usr1)
    steps, out = int(sys.argv[1]), Path(sys.argv[2])
    hold = "--hold" in sys.argv
    fail_first = int(sys.argv[sys.argv.index("--fail-first") + 1]) if "--fail-first" in sys.argv else 0
    rank, attempt = int(os.environ["STINT_RANK"]), int(os.environ["STINT_ATTEMPT"])
    ckpt = Path(os.environ["STINT_CKPT_DIR"]) / "counter.json"
    state = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0, "total": 0, "resumes": []}
    if rank == 0:
        state["resumes"].append([attempt, state["step"], int(os.environ["STINT_WORLD_SIZE"]),
                                 int(os.environ["STINT_LOGICAL_WORLD_SIZE"])])
    print(f"rank {rank} attempt {attempt} starts at step {state['step']}", flush=True)
    while True:
        if stop:
            if rank == 0:
                ckpt.parent.mkdir(parents=True, exist_ok=True)
                tmp = ckpt.with_suffix(".tmp")
                tmp.write_text(json.dumps(state))
                os.replace(tmp, ckpt)
            print(f"rank {rank} checkpointed at step {state['step']}", flush=True)
            return 75
        if state["step"] < steps:
            state["step"] += 1
            state["total"] += state["step"]
            if attempt <= fail_first and state["step"] >= 1:
                print(f"rank {rank} attempt {attempt} fails on purpose", flush=True)
                return 3
        elif not hold or (out / "release").exists():
            break
        time.sleep(0.02)
    if rank == 0:
        (out / "result.json").write_text(json.dumps(state))
        with (out / "completions").open("a") as f:
            f.write(f"{attempt}\n")
    print(f"rank {rank} done: total {state['total']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
