"""A worker of the multi-process tests: a small dropout MLP, SGD every ``--accumulate`` steps.

Prints ``done digest HEX``; with ``--diverge-at S`` worker ``--diverger`` (1) nudges a weight before
step S (outside the micro-batch loop; ``--diverge-late``: after step S's optimizer step, so that
only the next boundary or the final checkpoint can see it), and a DivergenceError is printed as
``divergence: ...`` (exit 3). ``--draw-after``: every step draws from Python's, NumPy's and torch's
global generators after the micro-batch loop and nudges a weight by what it drew. ``--stop-at S``:
every worker asks for a stop in step S. ``--counts``: every micro-batch counts itself in a rank
counter and (the wrong way) in ``counters``; ``done`` then ends with ``micro-batches N``.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import stint.torch as stint


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--exchange", default="auto")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--accumulate", type=int, default=2)
    p.add_argument("--diverge-at", type=int, default=None)
    p.add_argument("--diverger", type=int, default=1)
    p.add_argument("--diverge-late", action="store_true")
    p.add_argument("--draw-after", action="store_true")
    p.add_argument("--stop-at", type=int, default=None)
    p.add_argument("--check-every", type=int, default=2)
    p.add_argument("--counts", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--checkpoint-every", type=int, default=None, help="periodic (background) checkpoints")
    args = p.parse_args()
    if args.counts:
        sys.stderr = sys.stdout  # the SDK's warnings into the one file a test reads
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 63), nn.Tanh(), nn.Dropout(0.2), nn.Linear(63, 4)).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(256, 32, generator=g), torch.randint(0, 4, (256,), generator=g)
    x, y = x.to(args.device), y.to(args.device)  # 2335 parameters: not divisible by 2 or 4
    every = stint.Interval(steps=args.checkpoint_every) if args.checkpoint_every else None
    job = stint.init(model=model, optimizer=opt, check_every=args.check_every, exchange=args.exchange,
                     interval=every, keep=2, counters={"mb": 0}, rank_counters={"mb": 0, "seen": 0})
    sampler = stint.Sampler(len(x), batch_size=32, seed=0)
    try:
        for step in job.steps(args.steps):
            if step == args.stop_at:
                job.request_stop()
            if step == args.diverge_at and job.env.rank == args.diverger and not args.diverge_late:
                with torch.no_grad():
                    model[0].weight[0, 0] += 1e-3
            if step % args.accumulate == 0:
                opt.zero_grad()
            losses = []
            for idx in job.batches(sampler):
                idx = idx.to(args.device)
                loss = F.cross_entropy(model(x[idx]), y[idx])
                loss.backward()
                losses.append(loss)
                if args.counts:
                    job.rank_counters["mb"] += 1
                    job.rank_counters["seen"] += int(idx.sum())  # differs between logical ranks
                    job.counters["mb"] += 1
            mean = job.all_reduce_mean(losses)
            if args.draw_after:
                drawn = random.random() + float(np.random.standard_normal()) + torch.rand(()).item()
                with torch.no_grad():
                    model[3].bias[0] += 1e-3 * drawn
            if (step + 1) % args.accumulate == 0:
                opt.step()
            if step == args.diverge_at and job.env.rank == args.diverger and args.diverge_late:
                with torch.no_grad():
                    model[3].weight[1, 1] += 1e-3
            job.print(f"step {step} loss {mean.item()!r}")
    except stint.DivergenceError as e:
        print(f"divergence: {e}", flush=True)
        return 3
    h = hashlib.sha256(b"".join(t.cpu().contiguous().view(torch.uint8).numpy().tobytes()
                                for t in model.state_dict().values()))
    seen = " ".join(f"{how} {job.rank_counters_reduce('seen', how)!r}" for how in ("sum", "mean", "max", "min"))
    counted = f" seen {seen} micro-batches {job.rank_counters_total('mb')}" if args.counts else ""
    print(f"done digest {h.hexdigest()[:16]} exchange {job.exchange}{counted}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
