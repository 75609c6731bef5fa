"""Gradient exchange that keeps the math of L logical ranks whatever the number P of workers.

The L logical ranks' gradients are summed along one fixed binary tree over the logical ranks
(``split``: the left part is the largest power of two below the width), then divided by L. Every
worker adds the gradients of its own ranks as they come (a subtree is folded as soon as its last
leaf arrives, so a worker hosting an aligned block keeps O(log(L/P)) flat gradients, one when
P = L or P = 1), and only the resulting subtree sums travel. Elementwise sums along the same tree
give the same bits for every P and every placement: the result is bitwise independent of how
many workers host the logical ranks (the framework-level analogue of Singularity's replica
splicing).

Two ways to bring the subtree sums together, chosen by size (both give the same bits):

- *sharded* (large models): an ``all_to_all`` sends shard j of every subtree sum to worker j,
  which finishes the tree on its shard; an all-gather of the finished shards (a second
  ``all_to_all``, of P copies: gloo's allgather is slower) gives everyone the mean. Traffic is that
  of one reduce-scatter plus one all-gather, i.e. of one ring all-reduce; the buffers are kept
  across steps (no allocation per step).
- *gathered* (small models, where a collective's latency dominates): one ``all_gather`` of every
  worker's subtree sums, and every worker finishes the whole tree.

The job's control flags and the has-gradient mask ride in a small header of the last collective:
one exchange per step carries both the gradients and the stop/checkpoint agreement (Singularity's
meta all-reduce).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

STOP = 1  # a worker was asked to stop (SIGUSR1/SIGTERM): every worker stops at the next boundary
CHECKPOINT = 2  # rank 0's interval policy says a periodic checkpoint is due
# torch 2.13 renamed all_gather_into_tensor (deprecated there) to all_gather_single.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
SHARDED_MIN_BYTES = 1 << 18  # gradients from 256 KiB: the sharded path (benchmarks/RESULTS.md)

Segment = tuple[int, int]  # logical ranks [lo, hi)


def split(lo: int, hi: int) -> int:
    """Where the tree splits [lo, hi): after the largest power of two below its width."""
    width = hi - lo
    return lo + (1 << ((width - 1).bit_length() - 1))


def parents(logical_world_size: int) -> dict[Segment, Segment]:
    """Each non-root node of the tree over [0, L) and its parent."""
    out: dict[Segment, Segment] = {}
    todo = [(0, logical_world_size)]
    while todo:
        lo, hi = todo.pop()
        if hi - lo > 1:
            mid = split(lo, hi)
            out[(lo, mid)] = out[(mid, hi)] = (lo, hi)
            todo += [(lo, mid), (mid, hi)]
    return out


def cover(ranks: Sequence[int], logical_world_size: int) -> list[Segment]:
    """The maximal subtrees a worker hosting ``ranks`` completes on its own, in logical order."""
    up = parents(logical_world_size)
    done: set[Segment] = set()
    for r in ranks:
        seg = (r, r + 1)
        while seg in up:
            lo, hi = up[seg]
            sibling = (split(lo, hi), hi) if seg[0] == lo else (lo, split(lo, hi))
            if sibling not in done:
                break
            done.remove(sibling)
            seg = (lo, hi)
        done.add(seg)
    return sorted(done)


def finish(values: dict[Segment, torch.Tensor], lo: int, hi: int) -> torch.Tensor:
    """The tree's sum over [lo, hi) from subtree sums that cover it (reads ``values`` only)."""
    if (lo, hi) in values:
        return values[(lo, hi)]
    mid = split(lo, hi)
    return finish(values, lo, mid) + finish(values, mid, hi)


class Exchange:
    """Take each hosted logical rank's gradients in turn, then reduce them across all workers."""

    def __init__(self, params: Sequence[torch.Tensor], placement: Sequence[Sequence[int]],
                 *, sharded: bool | None = None) -> None:
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            raise TypeError(f"stint: parameters of one dtype are required for exact reduction, got {dtypes}")
        self.params = list(params)
        self.placement = [tuple(r) for r in placement]  # placement[p] = logical ranks worker p hosts
        self.world_size = len(self.placement)
        self.logical_world_size = sum(len(r) for r in self.placement)
        self.n = sum(p.numel() for p in self.params)
        self.dtype = dtypes.pop() if dtypes else torch.float32
        self.device = self.params[0].device if self.params else torch.device("cpu")
        self.covers = [cover(r, self.logical_world_size) for r in self.placement]
        self._up = parents(self.logical_world_size)
        nbytes = self.n * torch.empty(0, dtype=self.dtype).element_size()
        self.sharded = (nbytes >= SHARDED_MIN_BYTES) if sharded is None else sharded
        self.sharded = self.sharded and self.world_size > 1
        self.shard = -(-self.n // self.world_size) if self.sharded else self.n  # ceil(n / P)
        self._done: dict[Segment, torch.Tensor] = {}
        self._mask = [False] * len(self.params)
        self._free: list[torch.Tensor] = []  # flat buffers (width ``_buffer``) kept across steps
        self._spare: list[torch.Tensor] = []  # shard-sized scratch for finishing the tree
        self._recv: torch.Tensor | None = None
        self._send: torch.Tensor | None = None
        self._handed: torch.Tensor | None = None  # the buffer the last step's gradients view

    def start_step(self, reuse: bool) -> None:
        """A micro-batch loop begins. ``reuse``: the last step's gradients are no parameter's
        ``.grad`` any more (zero_grad ran), so their buffer may take this step's (no allocation,
        no page faults: what DDP's gradient buckets do)."""
        if reuse and self._handed is not None and self._handed.numel() == self._width():
            self._free.append(self._handed)
        self._handed = None

    def _width(self) -> int:
        return self.shard * self.world_size if self.sharded else self.n

    def _buffer(self) -> torch.Tensor:
        return self._free.pop() if self._free else torch.empty(self._width(), dtype=self.dtype, device=self.device)

    def take(self, logical_rank: int) -> None:
        """Fold the live gradients (of logical rank ``logical_rank``'s micro-batch) in; clear them."""
        flat, offset = self._buffer(), 0
        flat[self.n :].zero_()
        for i, p in enumerate(self.params):
            numel = p.numel()
            if p.grad is None:
                flat[offset : offset + numel].zero_()
            else:
                flat[offset : offset + numel].copy_(p.grad.reshape(-1))
                self._mask[i] = True
                p.grad = None
            offset += numel
        seg = (logical_rank, logical_rank + 1)
        while seg in self._up:  # fold every subtree this leaf completes
            lo, hi = self._up[seg]
            mid = split(lo, hi)
            sibling = (mid, hi) if seg[0] == lo else (lo, mid)
            if sibling not in self._done:
                break
            other = self._done.pop(sibling)
            left, right = (flat, other) if seg[0] == lo else (other, flat)
            flat = left.add_(right)  # left + right: the same elementwise sum on every worker
            self._free.append(right)
            seg = (lo, hi)
        self._done[seg] = flat

    def reduce(self, flags: int) -> int:
        """Set every parameter's gradient to the mean over logical ranks; return the agreed flags."""
        local = dict(sorted(self._done.items()))
        self._done = {}
        header = torch.tensor([*map(float, self._mask), float(flags)], dtype=self.dtype, device=self.device)
        self._mask = [False] * len(self.params)
        if self.world_size == 1:
            total, headers = local[(0, self.logical_world_size)], header[None]
        elif self.sharded:
            total, headers = self._reduce_sharded(local, header)
        else:
            total, headers = self._reduce_gathered(local, header)
        self._handed = total
        total = total[: self.n].div_(self.logical_world_size)
        has_grad = headers[:, :-1].amax(dim=0).tolist()
        offset = 0
        for i, p in enumerate(self.params):
            numel = p.numel()
            p.grad = total[offset : offset + numel].view_as(p) if has_grad[i] > 0 else None
            offset += numel
        agreed = 0
        for value in headers[:, -1].tolist():
            agreed |= int(value)
        return agreed

    def _reduce_gathered(self, local: dict[Segment, torch.Tensor],
                         header: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = max(len(c) for c in self.covers)
        width = self.n + header.numel()
        mine = torch.zeros(rows, width, dtype=self.dtype, device=self.device)
        for j, value in enumerate(local.values()):
            mine[j, : self.n] = value
        mine[0, self.n :] = header
        self._free += list(local.values())
        out = gather(mine, self.world_size).view(self.world_size * rows, width)
        values = {seg: out[w * rows + j, : self.n] for w, c in enumerate(self.covers) for j, seg in enumerate(c)}
        total = finish(values, 0, self.logical_world_size).clone()
        return total, out[0 :: rows, self.n :]

    def _reduce_sharded(self, local: dict[Segment, torch.Tensor],
                        header: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p, s = self.world_size, self.shard
        mine = list(local.values())
        if len(mine) == 1:
            send = mine[0]
        else:  # [node, worker, shard] -> [worker, node, shard]
            send = torch.stack([m.view(p, s) for m in mine], dim=1).reshape(-1)
        if self._recv is None:  # kept across steps, like DDP's buckets
            self._recv = torch.empty(sum(len(c) for c in self.covers) * s, dtype=self.dtype, device=self.device)
            self._send = torch.empty(p, s, dtype=self.dtype, device=self.device)
        recv, send2 = self._recv, self._send
        assert send2 is not None
        if len({len(c) for c in self.covers}) == 1:  # even splits: gloo's faster alltoall
            dist.all_to_all_single(recv, send)
        else:
            dist.all_to_all_single(recv, send, output_split_sizes=[len(c) * s for c in self.covers],
                                   input_split_sizes=[len(mine) * s] * p)
        self._free += mine
        parts = recv.view(-1, s)
        values, k = {}, 0
        for c in self.covers:
            for seg in c:
                values[seg] = parts[k]
                k += 1
        finish_into(values, 0, self.logical_world_size, send2[0], self._spare)
        send2[1:] = send2[0]
        # The all-gather as an all_to_all of P copies of the shard: on gloo 3x faster than its
        # allgather at 200 MB (benchmarks/RESULTS.md), the same bytes on the wire.
        total = self._buffer()
        dist.all_to_all_single(total, send2.view(-1))
        return total, gather(header, p)  # the small header on its own: no copy of the gradients


def finish_into(values: dict[Segment, torch.Tensor], lo: int, hi: int, out: torch.Tensor,
                spare: list[torch.Tensor]) -> None:
    """:func:`finish` written into ``out``, with scratch from ``spare`` (returned there after)."""
    if (lo, hi) in values:
        out.copy_(values[(lo, hi)])
        return
    mid = split(lo, hi)
    left = values.get((lo, mid))
    if left is None:
        finish_into(values, lo, mid, out, spare)
        left = out
    right, scratch = values.get((mid, hi)), None
    if right is None:
        scratch = spare.pop() if spare else torch.empty_like(out)
        finish_into(values, mid, hi, scratch, spare)
        right = scratch
    torch.add(left, right, out=out)  # left + right, elementwise: the bits of finish()
    if scratch is not None:
        spare.append(scratch)


def gather(mine: torch.Tensor, world_size: int) -> torch.Tensor:
    """Every worker's ``mine`` (same shape on all), stacked: shape [world_size, *mine.shape]."""
    out = torch.empty(world_size * mine.numel(), dtype=mine.dtype, device=mine.device)
    _all_gather_single(out, mine.contiguous().reshape(-1))
    return out.view(world_size, *mine.shape)


def agree(flags: int, world_size: int, device: torch.device | None = None) -> int:
    """The job-wide OR of every worker's flags (one tiny all_reduce when there are peers)."""
    if world_size == 1:
        return flags
    t = torch.tensor([flags & STOP, flags & CHECKPOINT], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.sum().item())
