"""Data-parallel training over gloo on 127.0.0.1: P worker processes host L logical ranks.

Alone, it launches its own workers (like torchrun) and forwards SIGUSR1/SIGTERM to them:

    python examples/ddp.py --workers 2 --logical 4 --ckpt-dir /tmp/ddp-ckpt --log-every 10

Under stint (STINT_RANK set by the executor) this process is one worker. Gradients of the L
logical ranks are reduced by stint in a fixed order (do not wrap the model in
DistributedDataParallel as well), so the result is bitwise the same for any P dividing L.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.nn.functional as F
from common import SmallCNN, arguments, classification_data, digest, image_data, mlp

import stint.torch as stint  # stint (1/5)
from stint.torch import launch


def train(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y = image_data(n=512) if args.model == "cnn" else classification_data()
    model = SmallCNN(width=8) if args.model == "cnn" else mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    job = stint.init(model=model, optimizer=opt, logical_world_size=args.logical,  # stint (2/5)
                     ckpt_dir=args.ckpt_dir, interval=stint.Interval(steps=args.checkpoint_every))
    sampler = stint.Sampler(len(x), batch_size=args.batch_size, seed=args.seed)  # stint (3/5)
    for step in job.steps(args.steps):  # stint (4/5)
        opt.zero_grad()
        for idx in job.batches(sampler):  # stint (5/5)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        if args.log_every and (step + 1) % args.log_every == 0 and job.env.rank == 0:
            print(f"step {step + 1} digest {digest(model)}", flush=True)
        time.sleep(args.sleep)
    if job.env.rank == 0:
        print(f"done step {args.steps} digest {digest(model)}", flush=True)


def main() -> None:
    p = arguments(__doc__.splitlines()[0], steps=60, batch_size=64)
    p.add_argument("--workers", type=int, default=2, help="workers to launch when run alone")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    args = p.parse_args()
    if "STINT_RANK" in os.environ:
        train(args)
        return
    logical = args.logical or args.workers
    cmd = [sys.executable, __file__, *sys.argv[1:], "--logical", str(logical)]
    sys.exit(launch.run(cmd, args.workers, logical, args.ckpt_dir))


if __name__ == "__main__":
    main()
