"""Train a small MLP (with dropout) on generated data: preemptible, resumable, elastic under stint.

    python examples/mlp.py --steps 200 --ckpt-dir /tmp/mlp-ckpt --log-every 20
"""

from __future__ import annotations  # noqa: I001 - stint.torch is imported before torch on purpose

import stint.torch as stint  # stint (1/5); first: a preemption during `import torch` is kept

import time

import torch
import torch.nn.functional as F
from common import arguments, classification_data, digest, mlp, pad



def main() -> None:
    args = arguments(__doc__.splitlines()[0], steps=200, batch_size=64).parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x, y = classification_data()
    model = mlp()
    pad(model, args.pad_mb, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=50, gamma=0.5)
    job = stint.init(model=model, optimizer=opt, scheduler=sched,  # stint (2/5)
                     logical_world_size=args.logical, ckpt_dir=args.ckpt_dir,
                     interval=stint.Interval(steps=args.checkpoint_every))
    sampler = stint.Sampler(len(x), batch_size=args.batch_size, seed=args.seed)  # stint (3/5)
    for step in job.steps(args.steps):  # stint (4/5)
        opt.zero_grad()
        for idx in job.batches(sampler):  # stint (5/5)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
        sched.step()
        if args.log_every and (step + 1) % args.log_every == 0 and job.env.rank == 0:
            print(f"step {step + 1} digest {digest(model)}", flush=True)
        time.sleep(args.sleep)
    if job.env.rank == 0:
        print(f"done step {args.steps} digest {digest(model)}", flush=True)


if __name__ == "__main__":
    main()
