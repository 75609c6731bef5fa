"""A preemption request that arrives while the script is still importing torch is kept, not fatal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from stint.torch.store import CheckpointStore

MLP = Path(__file__).resolve().parents[2] / "examples" / "mlp.py"


def _catches_sigusr1(pid: int) -> bool:
    """Whether the process has a handler for SIGUSR1 (the SigCgt mask in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)
    return False


def test_sigusr1_during_start_up_checkpoints_and_exits_75(tmp_path):
    env = dict(os.environ, STINT_CKPT_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, str(MLP), "--steps", "5"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not _catches_sigusr1(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    # stint.torch is the example's first import: its handler is armed before torch is imported,
    # so this signal lands during start-up, seconds before the first step.
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err.decode()
    assert [c.step for c in CheckpointStore(tmp_path).checkpoints()] == [0]  # stopped before step 0
