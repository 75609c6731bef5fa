"""stint.torch steady-state and time-slicing overhead on the example CNN (examples/common.py).

1. Steady state: the same training loop with and without the SDK (P = L = 1), per-step time.
2. Time slicing: 4 logical ranks on 1 worker (global batch B) against the ideal, 4 x the step time
   of one worker running one rank's share (B/4) without the SDK (Singularity Fig. 4's measure).

Both run interleaved blocks (A, B, A, B, ...) in one process and compare medians, because the
machine is shared and noisy. Run:  .venv/bin/python benchmarks/torch_overhead.py
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from common import SmallCNN, image_data

import stint.torch as stint

DEVICE = torch.device("cpu")


def plain(batch: int) -> Iterator[None]:
    """The example CNN's loop without stint: its own shuffled indices, one step per next()."""
    torch.manual_seed(0)
    x, y = (t.to(DEVICE) for t in image_data())
    model = SmallCNN().to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step, perm = 0, torch.randperm(len(x))
    while True:
        i = step % (len(x) // batch)
        if i == 0:
            perm = torch.randperm(len(x)).to(DEVICE)
        idx = perm[i * batch : (i + 1) * batch]
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        step += 1
        yield


def with_stint(batch: int, logical: int) -> Iterator[None]:
    """The same loop through stint (no checkpoint directory: the per-step machinery only)."""
    torch.manual_seed(0)
    x, y = (t.to(DEVICE) for t in image_data())
    model = SmallCNN().to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    job = stint.init(model=model, optimizer=opt, logical_world_size=logical)
    sampler = stint.Sampler(len(x), batch_size=batch, seed=0)
    for _ in job.steps(10**12):
        opt.zero_grad()
        for idx in job.batches(sampler):
            idx = idx.to(DEVICE)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        yield


def bookkeeping(logical: int, steps: int = 20000) -> float:
    """Seconds per step of stint's own work alone: steps(), batches() and the sampler, empty body."""
    job = stint.init(logical_world_size=logical)
    sampler = stint.Sampler(1024, batch_size=64, seed=0)
    t0 = time.perf_counter()
    for _ in job.steps(steps):
        for _idx in job.batches(sampler):
            pass
    return (time.perf_counter() - t0) / steps


def rounds(loops: dict[str, Iterator[None]], blocks: int, steps: int) -> dict[str, list[float]]:
    """Seconds per step of each loop in each of ``blocks`` rounds of ``steps`` steps; every round
    runs every loop once, in a shuffled order, so load from other users hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in loops}
    for loop in loops.values():  # warm up
        for _ in range(steps):
            next(loop)
    order, rng = list(loops), random.Random(0)
    for _ in range(blocks):
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            for _ in range(steps):
                next(loops[name])
            if DEVICE.type == "cuda":
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / steps)
    return times


def paired(a: list[float], b: list[float], scale: float = 1.0) -> str:
    """Median over rounds of a/(scale*b) - 1 (paired: each round's own conditions cancel)."""
    ratios = sorted(x / (scale * y) for x, y in zip(a, b))
    q = len(ratios) // 4
    return (f"{100 * (statistics.median(ratios) - 1):+.2f}% "
            f"(interquartile {100 * (ratios[q] - 1):+.1f}% .. {100 * (ratios[-q - 1] - 1):+.1f}%)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=60)
    p.add_argument("--steps", type=int, default=5, help="steps per block")
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    global DEVICE
    DEVICE = torch.device(a.device)
    t = rounds({"plain": plain(a.batch), "plain again": plain(a.batch), "stint": with_stint(a.batch, 1)},
               a.blocks, a.steps)
    own = bookkeeping(1)
    plain_ms = statistics.median(t["plain"]) * 1e3
    print(f"steady state, CNN batch {a.batch}, P=L=1, {a.blocks} rounds x {a.steps} steps:")
    print(f"  median ms/step: plain {plain_ms:.3f}, stint {statistics.median(t['stint']) * 1e3:.3f}")
    print(f"  stint / plain - 1, paired: {paired(t['stint'], t['plain'])}")
    print(f"  noise floor, plain again / plain - 1: {paired(t['plain again'], t['plain'])}")
    print(f"  stint's own per-step work: {own * 1e6:.1f} us = {100 * own / (plain_ms / 1e3):.3f}% of a plain step")
    share = a.batch // 4
    t = rounds({"one rank": plain(share), "4 on 1": with_stint(a.batch, 4)}, a.blocks, a.steps)
    own4 = bookkeeping(4, steps=5000)
    one_ms = statistics.median(t["one rank"]) * 1e3
    print(f"time slicing, 4 logical ranks on 1 worker, global batch {a.batch}:")
    print(f"  median ms/step: one rank (batch {share}, no stint) {one_ms:.3f}, ideal 4x {4 * one_ms:.3f}, "
          f"sliced {statistics.median(t['4 on 1']) * 1e3:.3f}")
    print(f"  sliced / (4 x one rank) - 1, paired: {paired(t['4 on 1'], t['one rank'], 4.0)}")
    print(f"  stint's own per-step work with 4 ranks (RNG swaps, reduce; no parameters): {own4 * 1e6:.1f} us "
          f"= {100 * own4 / (4 * one_ms / 1e3):.2f}% of the ideal step")

if __name__ == "__main__":
    main()
