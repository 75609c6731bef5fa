"""A stint.torch job for the last-step tests: STEPS steps of a tiny model, then an epilogue that
waits until RELEASE exists (up to 120 s) and prints one line per worker.

Usage: last_step_job.py STEPS RELEASE
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

import stint.torch as stint


def main() -> int:
    steps, release = int(sys.argv[1]), Path(sys.argv[2])
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    job = stint.init(model=model, optimizer=opt)
    for _ in job.steps(steps):
        opt.zero_grad()
        for lr in job.logical_ranks():
            model(torch.full((3, 4), float(lr))).sum().backward()
        opt.step()
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"epilogue rank {os.environ['RANK']} step {job.step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
