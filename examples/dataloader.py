"""Train a small CNN on augmented images with a DataLoader (AdamW, one-cycle LR, bf16 AMP, clipping).

    python examples/dataloader.py --epochs 2 --batch-size 32 --logical 4 --ckpt-dir /tmp/dl-ckpt

examples/dataloader_plain.py is the plain PyTorch script and examples/dataloader.py the same under
stint: `diff examples/dataloader_plain.py examples/dataloader.py` shows every changed line.
"""

import stint.torch as stint  # noqa: I001 - first: a preemption during `import torch` is kept
import time

import torch
import torch.nn.functional as F
from common import AugmentedImages, SmallCNN, arguments, digest, evaluate
from torch.utils.data import DataLoader


def train_loss(model, x, y):
    """Forward (autocast to bfloat16: AMP on the CPU) and backward of one batch; its loss."""
    device = next(model.parameters()).device
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach()


def main() -> None:
    args = arguments(__doc__.splitlines()[0], steps=0, batch_size=32).parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(args.seed)
    train_set, eval_set = AugmentedImages(train=True), AugmentedImages(train=False)
    model = SmallCNN().to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    total = args.epochs * (len(train_set) // args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=total, pct_start=0.25)
    job = stint.init(model=model, optimizer=opt, scheduler=sched, logical_world_size=args.logical, ckpt_dir=args.ckpt_dir)  # noqa: E501
    loader = job.loader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=2)
    eval_loader = DataLoader(eval_set, batch_size=64)
    step = job.step
    for epoch in job.epochs(args.epochs):
        for batch in loader:
            model.train()
            opt.zero_grad()
            loss = [train_loss(model, x, y) for x, y in batch]
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            opt.step()
            sched.step()
            step += 1
            if step % args.eval_every == 0:
                job.print(f"step {step} loss {float(job.all_reduce_mean(loss)):.4f} eval {evaluate(model, eval_loader):.3f}")  # noqa: E501
            time.sleep(args.sleep)
    print(f"done step {step} digest {digest(model)}", flush=True)


if __name__ == "__main__":
    main()
