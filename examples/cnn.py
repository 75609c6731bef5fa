"""Train a small CNN (with BatchNorm) on generated images: preemptible, resumable, elastic under stint.

    python examples/cnn.py --steps 100 --ckpt-dir /tmp/cnn-ckpt --log-every 10
"""

from __future__ import annotations  # noqa: I001 - stint.torch is imported before torch on purpose

import stint.torch as stint  # stint (1/5); first: a preemption during `import torch` is kept

import time

import torch
import torch.nn.functional as F
from common import SmallCNN, arguments, digest, image_data



def main() -> None:
    args = arguments(__doc__.splitlines()[0], steps=100, batch_size=32).parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y = image_data()
    model = SmallCNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    job = stint.init(model=model, optimizer=opt,  # stint (2/5)
                     logical_world_size=args.logical, ckpt_dir=args.ckpt_dir,
                     interval=stint.Interval(steps=args.checkpoint_every))
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


if __name__ == "__main__":
    main()
