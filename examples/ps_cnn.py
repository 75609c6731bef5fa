"""Train a small CNN with parameter servers: PSs hold the parameter shards, workers pull, compute
gradients on their data chunks and push (synchronous or asynchronous); preemptible, resumable,
and resizable in both its worker and PS counts under stint.

    python examples/ps_cnn.py --steps 50 --ckpt-dir /tmp/ps-ckpt          # 1 worker, 1 PS
    python -m stint.torch.ps --workers 2 --ps 2 --logical 4 examples/ps_cnn.py --steps 50
"""

from __future__ import annotations  # noqa: I001 - stint.torch is imported before torch on purpose

import stint.torch as stint  # first: a preemption during `import torch` is kept

import time

import torch
import torch.nn.functional as F
from torch import nn
from common import arguments, digest, image_data

from stint.torch import ps


class PlainCNN(nn.Module):
    """Two conv blocks and a linear head, without BatchNorm: the PSs hold every parameter."""

    def __init__(self, classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def main() -> None:
    p = arguments(__doc__.splitlines()[0], steps=50, batch_size=32)
    p.add_argument("--mode", choices=ps.MODES, default="sync")
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y = image_data()
    model = PlainCNN()
    job = ps.init(model, lr=args.lr, momentum=0.9, mode=args.mode,
                  logical_world_size=args.logical, ckpt_dir=args.ckpt_dir)
    sampler = stint.Sampler(len(x), batch_size=args.batch_size, seed=args.seed)
    for step in job.steps(args.steps):
        for idx in job.batches(sampler):
            F.cross_entropy(model(x[idx]), y[idx]).backward()
        if args.log_every and (step + 1) % args.log_every == 0 and job.env.rank == 0:
            print(f"step {step + 1} digest {digest(model)}", flush=True)
        time.sleep(args.sleep)
    if job.env.rank == 0:
        print(f"done step {args.steps} digest {digest(model)}", flush=True)


if __name__ == "__main__":
    main()
