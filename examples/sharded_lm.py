"""Train a small transformer LM with its parameters, gradients and AdamW state sharded by logical rank.

    python -m stint.torch.launch --workers 4 --logical 4 --ckpt-dir /tmp/lm-ckpt examples/sharded_lm.py

ZeRO-3 / FSDP style under stint: `stint.init(..., shard=True)` keeps 1/P of the model's state per
worker, gathers each block's weights when it runs and reduce-scatters its gradients in a fixed
logical order, so the digest is the same on P = 1, 2 and 4 workers (L = 4) and after a resume
on another P. Prints `done step N digest D peak-bytes B` (B: the most parameter + optimizer bytes
the worker held at once) on every worker.
"""

import stint.torch as stint  # noqa: I001 - first: a preemption during `import torch` is kept
import math
import time

import torch
import torch.nn.functional as F
from common import arguments, digest
from torch import nn


class Block(nn.Module):
    """Pre-norm causal self-attention and an MLP, with dropout (a logical rank's own stream)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(att))
        return x + self.drop(self.mlp(self.norm2(x)))


class LM(nn.Module):
    def __init__(self, vocab: int = 64, d: int = 64, heads: int = 4, layers: int = 8, context: int = 32) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def markov_text(n: int = 512, context: int = 32, vocab: int = 64, seed: int = 1234) -> torch.Tensor:
    """Sequences of a random sparse Markov chain: learnable, generated on the fly."""
    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(0, vocab, (vocab, 3), generator=g)
    seqs = torch.empty(n, context + 1, dtype=torch.long)
    seqs[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for t in range(context):
        seqs[:, t + 1] = nxt[seqs[:, t], torch.randint(0, 3, (n,), generator=g)]
    return seqs


def main() -> None:
    args = arguments(__doc__.splitlines()[0], steps=12, batch_size=32).parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = markov_text()
    model = LM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    warmup = 4
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    job = stint.init(model=model, optimizer=opt, scheduler=sched, shard=True,  # sharded by logical rank
                     logical_world_size=args.logical, ckpt_dir=args.ckpt_dir,
                     interval=stint.Interval(steps=args.checkpoint_every))
    sampler = stint.Sampler(len(data), batch_size=args.batch_size, seed=args.seed)
    for step in job.steps(args.steps):
        opt.zero_grad()
        losses = []
        for idx in job.batches(sampler):
            seq = data[idx]
            loss = F.cross_entropy(model(seq[:, :-1]).reshape(-1, 64), seq[:, 1:].reshape(-1))
            loss.backward()
            losses.append(loss.detach())
        job.clip_grad_norm_(1.0)  # over the shards: the same norm on any P
        opt.step()
        sched.step()
        if args.log_every and (step + 1) % args.log_every == 0:
            job.print(f"step {step + 1} loss {float(job.all_reduce_mean(losses)):.4f}")
        time.sleep(args.sleep)
    print(f"done step {args.steps} digest {digest(model)} peak-bytes {job.peak_sharded_bytes}", flush=True)


if __name__ == "__main__":
    main()
