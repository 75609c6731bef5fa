"""Gradient exchange that keeps the math of L logical ranks whatever the number P of workers.

Each logical rank's gradient is stashed in its own row; the rows of all L logical ranks are
gathered (one ``all_gather`` per step) and summed in logical-rank order on every worker, then
divided by L. The order of floating-point additions is therefore the same for P = 1, 2 or L, and
the result is bitwise independent of how many workers host the logical ranks (the framework-level
analogue of Singularity's replica splicing). The job's control flags ride in the last column of
the same rows: one collective per step carries both the gradients and the stop/checkpoint
agreement (Singularity's meta all-reduce).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

STOP = 1  # a worker was asked to stop (SIGUSR1/SIGTERM): every worker stops at the next boundary
CHECKPOINT = 2  # rank 0's interval policy says a periodic checkpoint is due


class Exchange:
    """Stash per-logical-rank gradients, then reduce them in a fixed order across all workers."""

    def __init__(self, params: Sequence[torch.Tensor], placement: Sequence[Sequence[int]]) -> None:
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            raise TypeError(f"stint: parameters of one dtype are required for exact reduction, got {dtypes}")
        self.params = list(params)
        self.placement = [tuple(r) for r in placement]  # placement[p] = logical ranks worker p hosts
        self.world_size = len(self.placement)
        self.logical_world_size = sum(len(r) for r in self.placement)
        self.n = sum(p.numel() for p in self.params)
        self.width = self.n + len(self.params) + 1  # gradients | has-gradient mask | flags
        dtype = dtypes.pop() if dtypes else torch.float32
        self.rows = torch.zeros(len(self.placement[0]), self.width, dtype=dtype)
        gathered = [lr for ranks in self.placement for lr in ranks]
        self._order = [gathered.index(lr) for lr in range(self.logical_world_size)]

    def stash(self, slot: int) -> None:
        """Move the live gradients (of the micro-batch just run) into row ``slot``; clear them."""
        row, offset = self.rows[slot], 0
        for i, p in enumerate(self.params):
            numel = p.numel()
            if p.grad is None:
                row[offset : offset + numel].zero_()
                row[self.n + i] = 0
            else:
                row[offset : offset + numel].copy_(p.grad.reshape(-1))
                row[self.n + i] = 1
                p.grad = None
            offset += numel

    def reduce(self, flags: int) -> int:
        """Set every parameter's gradient to the mean over logical ranks; return the agreed flags."""
        self.rows[:, -1] = flags
        if self.world_size > 1:
            out = torch.empty(self.world_size * self.rows.shape[0], self.width, dtype=self.rows.dtype)
            dist.all_gather(list(out.chunk(self.world_size)), self.rows)
        else:
            out = self.rows
        rows = [out[i] for i in self._order]
        total = rows[0][: self.n].clone()
        for row in rows[1:]:  # fixed logical-rank order: the same additions for every P
            total.add_(row[: self.n])
        total.div_(self.logical_world_size)
        has_grad = torch.stack([row[self.n : -1] for row in rows]).amax(dim=0)
        offset = 0
        for i, p in enumerate(self.params):
            numel = p.numel()
            p.grad = total[offset : offset + numel].view_as(p) if has_grad[i] > 0 else None
            offset += numel
        agreed = 0
        for value in out[:, -1].tolist():
            agreed |= int(value)
        return agreed


def agree(flags: int, world_size: int) -> int:
    """The job-wide OR of every worker's flags (one tiny all_reduce when there are peers)."""
    if world_size == 1:
        return flags
    t = torch.tensor([flags & STOP, flags & CHECKPOINT], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.sum().item())
