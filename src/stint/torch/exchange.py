"""Gradient exchange that keeps the math of L logical ranks whatever the number P of workers.

The mean over the L logical ranks' gradients is one left fold in logical-rank order,
``((g0 + g1) + g2) + ...``, divided by L. Elementwise additions in one fixed order give the same
bits for every P and every placement: the result is bitwise independent of how many workers host
the logical ranks (the framework-level analogue of Singularity's replica splicing).

The fold runs in place in one accumulation buffer, so memory does not grow with L:

- one worker (P = 1): each micro-batch's gradients are added into the buffer as they come;
- *sharded* (large models): worker w hosts logical ranks ``w, w + P, w + 2P, ...`` by default, so
  the ranks of one time slice (the i-th micro-batch of every worker) are consecutive. After each
  slice an ``all_to_all`` sends shard j of every worker's gradients to worker j, which adds them
  in rank order into its one shard-sized accumulator (a reduce-scatter in a fixed order); after
  the last slice an all-gather of the finished shards (an ``all_to_all`` of P copies: gloo's
  allgather is slower) gives everyone the mean. With L = P that is the traffic of one ring
  all-reduce; every further slice adds one reduce-scatter's worth. Each slice's ``all_to_all`` is
  asynchronous: it runs while the next micro-batch computes, and is folded at the next slice (two
  send/receive buffer pairs, used in turn; ``overlap=False``: one, each slice waited for). A
  rank that arrives before its
  predecessors (a placement other than the default, ``STINT_LOGICAL_RANKS``) waits in a side
  buffer until they are folded: the same bits, more memory;
- *gathered* (small models, where a collective's latency dominates): one ``all_gather`` of every
  worker's micro-batch gradients, and every worker folds all L of them.

The job's control flags and the has-gradient mask ride in a small header of the last collective:
one exchange per step carries both the gradients and the stop/checkpoint agreement (Singularity's
meta all-reduce).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

STOP = 1  # a worker was asked to stop (SIGUSR1/SIGTERM): every worker stops at the next boundary
CHECKPOINT = 2  # rank 0's interval policy says a periodic checkpoint is due
# torch 2.13 renamed all_gather_into_tensor (deprecated there) to all_gather_single.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
SHARDED_MIN_BYTES = 1 << 18  # gradients from 256 KiB: the sharded path (benchmarks/RESULTS.md)


class Fold:
    """The left fold of flat values in logical-rank order into ``acc``, whatever order they come in."""

    def __init__(self, acc: torch.Tensor) -> None:
        self.acc, self.next = acc, 0
        self._early: dict[int, torch.Tensor] = {}  # ranks that came before their predecessors

    def offer(self, rank: int, value: torch.Tensor) -> None:
        """Fold ``value`` in as logical rank ``rank``'s (kept aside, copied, until its turn)."""
        if rank != self.next:
            self._early[rank] = value.clone()
            return
        self.add(0, self.acc.numel(), value)
        self.advance()

    def add(self, at: int, numel: int, value: torch.Tensor | None) -> None:
        """The next rank's values for ``acc[at : at + numel]`` (None: zeros). Call
        :meth:`advance` once the rank's values are all in."""
        target = self.acc[at : at + numel]
        if value is None and self.next == 0:
            target.zero_()
        elif value is None:
            target.add_(0.0)  # -0.0 + 0.0 is +0.0: the bits a zero-filled row gives elsewhere
        elif self.next == 0:
            target.copy_(value)
        else:
            target.add_(value)

    def advance(self) -> None:
        """The next rank is folded in; fold the ranks that were waiting for it."""
        self.next += 1
        while self.next in self._early:
            self.add(0, self.acc.numel(), self._early.pop(self.next))
            self.next += 1

    def complete(self, logical_world_size: int) -> bool:
        return self.next == logical_world_size and not self._early


class Exchange:
    """Take each hosted logical rank's gradients in turn, then reduce them across all workers."""

    def __init__(self, params: Sequence[torch.Tensor], placement: Sequence[Sequence[int]],
                 *, sharded: bool | None = None, overlap: bool = True) -> None:
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            raise TypeError(f"stint: parameters of one dtype are required for exact reduction, got {dtypes}")
        self.params = list(params)
        self.placement = [tuple(r) for r in placement]  # placement[p] = logical ranks worker p hosts
        if len({len(r) for r in self.placement}) != 1:
            raise ValueError(f"stint: every worker must host as many logical ranks, got {self.placement}")
        self.world_size = len(self.placement)
        self.logical_world_size = sum(len(r) for r in self.placement)
        self.n = sum(p.numel() for p in self.params)
        self.dtype = dtypes.pop() if dtypes else torch.float32
        self.device = self.params[0].device if self.params else torch.device("cpu")
        nbytes = self.n * torch.empty(0, dtype=self.dtype).element_size()
        self.sharded = (nbytes >= SHARDED_MIN_BYTES) if sharded is None else sharded
        self.sharded = self.sharded and self.world_size > 1
        self.shard = -(-self.n // self.world_size) if self.sharded else self.n  # ceil(n / P)
        self._mask = [False] * len(self.params)
        self._free: list[torch.Tensor] = []  # flat buffers (width ``_width()``) kept across steps
        self._handed: torch.Tensor | None = None  # the buffer the last step's gradients view
        self._flat: torch.Tensor | None = None  # this step's: the send buffer, or the fold (P = 1)
        self._fold: Fold | None = None
        self._slot = 0
        self._recv: torch.Tensor | None = None  # sharded: one slice's shards from every worker
        self._acc: torch.Tensor | None = None  # sharded: this worker's shard of the sum
        self._rows: torch.Tensor | None = None  # gathered: this worker's micro-batches' gradients
        # sharded, ``overlap``: a slice's all_to_all runs while the next micro-batch computes (its
        # fold waits for the next take); two send/receive buffer pairs, in turn.
        self.overlap = overlap
        self._spare: tuple[torch.Tensor, torch.Tensor] | None = None
        self._pending: tuple[Any, torch.Tensor, int] | None = None  # (work, received, slot)

    def start_step(self, reuse: bool) -> None:
        """A micro-batch loop begins. ``reuse``: the last step's gradients are no parameter's
        ``.grad`` any more (zero_grad ran), so their buffer may take this step's (no allocation,
        no page faults: what DDP's gradient buckets do)."""
        if reuse and self._handed is not None and self._handed.numel() == self._width():
            self._free.append(self._handed)
        self._handed = None
        self._slot = 0
        if self._pending is not None:  # a loop left early: its last slice is waited for, not folded
            self._pending[0].wait()
            self._pending = None
        self._flat = self._free.pop() if self._free else self._empty(self._width())
        if self.world_size == 1:
            self._fold = Fold(self._flat)
        elif self.sharded:
            if self._acc is None:  # kept across steps, like DDP's buckets
                self._acc, self._recv = self._empty(self.shard), self._empty(self._width())
            self._fold = Fold(self._acc)
        elif self._rows is None:
            self._rows = self._empty(len(self.placement[0]) * (self.n + len(self.params) + 1))

    def _empty(self, numel: int) -> torch.Tensor:
        return torch.empty(numel, dtype=self.dtype, device=self.device)

    def _width(self) -> int:
        return self.shard * self.world_size if self.sharded else self.n

    def take(self, logical_rank: int) -> None:
        """Fold the live gradients (of logical rank ``logical_rank``'s micro-batch) in; clear them."""
        if self._flat is None:
            raise RuntimeError("stint: Exchange.take before start_step")
        if self.world_size == 1:
            self._take_local(logical_rank)
        elif self.sharded:
            send, recv = self._pair(self._slot)
            self._flatten(send)
            # shard j of every worker's to worker j
            work = dist.all_to_all_single(recv, send, async_op=self.overlap)
            if self.overlap:
                self._settle()  # the slice before: received by now (gloo runs them in order)
                self._pending = (work, recv, self._slot)
            else:
                self._fold_slice(recv, self._slot)
        else:
            assert self._rows is not None
            width = self.n + len(self.params) + 1
            self._flatten(self._rows[self._slot * width : self._slot * width + self.n])
        self._slot += 1

    def _pair(self, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot ``slot``'s send and receive buffers: the step's own, or (odd slots, with
        ``overlap``) the spare pair, so a slice in flight is never overwritten."""
        assert self._flat is not None and self._recv is not None
        if not self.overlap or slot % 2 == 0:
            return self._flat, self._recv
        if self._spare is None:
            self._spare = (self._empty(self._width()), self._empty(self._width()))
        return self._spare

    def _fold_slice(self, received: torch.Tensor, slot: int) -> None:
        """Fold one time slice's shards (row w: worker w's rank of slot ``slot``) in rank order."""
        assert self._fold is not None
        rows = received.view(self.world_size, self.shard)
        for w, ranks in enumerate(self.placement):
            self._fold.offer(ranks[slot], rows[w])

    def _settle(self) -> None:
        """Wait for the slice in flight, if any, and fold it in."""
        if self._pending is not None:
            work, received, slot = self._pending
            self._pending = None
            work.wait()
            self._fold_slice(received, slot)

    def _take_local(self, logical_rank: int) -> None:
        """One worker hosts every rank: each parameter's gradient is added into the fold directly."""
        fold = self._fold
        assert fold is not None
        if logical_rank != fold.next:  # only with a placement other than the default
            fold.offer(logical_rank, self._flatten(self._empty(self.n)))
            return
        offset = 0
        for i, p in enumerate(self.params):
            numel = p.numel()
            fold.add(offset, numel, None if p.grad is None else p.grad.reshape(-1))
            if p.grad is not None:
                self._mask[i] = True
                p.grad = None
            offset += numel
        fold.advance()

    def _flatten(self, flat: torch.Tensor) -> torch.Tensor:
        """Copy the live gradients into ``flat`` (zeros where none, and in the padding); clear them."""
        flat[self.n :].zero_()
        offset = 0
        for i, p in enumerate(self.params):
            numel = p.numel()
            if p.grad is None:
                flat[offset : offset + numel].zero_()
            else:
                flat[offset : offset + numel].copy_(p.grad.reshape(-1))
                self._mask[i] = True
                p.grad = None
            offset += numel
        return flat

    def reduce(self, flags: int) -> int:
        """Set every parameter's gradient to the mean over logical ranks; return the agreed flags."""
        self._settle()
        header = torch.tensor([*map(float, self._mask), float(flags)], dtype=self.dtype, device=self.device)
        self._mask = [False] * len(self.params)
        total = self._flat
        assert total is not None
        if self.world_size == 1:
            headers = header[None]
        elif self.sharded:
            headers = self._gather_shards(total, header)
        else:
            headers = self._fold_gathered(total, header)
        if self._fold is not None and not self._fold.complete(self.logical_world_size):
            raise RuntimeError(f"stint: the exchange folded {self._fold.next} of {self.logical_world_size} "
                               "logical ranks' gradients (a micro-batch was not taken)")
        self._handed, self._flat, self._fold = total, None, None
        total = total[: self.n] if self.sharded else total[: self.n].div_(self.logical_world_size)
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

    def _gather_shards(self, total: torch.Tensor, header: torch.Tensor) -> torch.Tensor:
        """Everyone's finished shard into ``total`` (the send buffer, free now); the headers."""
        assert self._recv is not None and self._acc is not None
        copies = self._recv.view(self.world_size, self.shard)  # free too: the last slice is folded
        copies[:] = self._acc.div_(self.logical_world_size)  # the mean on the shard: 1/P of the divisions
        # The all-gather as an all_to_all of P copies of the shard: on gloo 3x faster than its
        # allgather at 200 MB (benchmarks/RESULTS.md), the same bytes on the wire.
        dist.all_to_all_single(total, self._recv)
        return gather(header, self.world_size)  # the small header on its own: no copy of the gradients

    def _fold_gathered(self, total: torch.Tensor, header: torch.Tensor) -> torch.Tensor:
        """Every worker's micro-batches' gradients (one all_gather), folded in rank order into ``total``."""
        assert self._rows is not None
        slots, width = len(self.placement[0]), self.n + len(self.params) + 1
        rows = self._rows.view(slots, width)
        rows[0, self.n :] = header
        out = gather(rows, self.world_size)  # [worker, slot, width]
        where = {lr: (w, s) for w, ranks in enumerate(self.placement) for s, lr in enumerate(ranks)}
        fold = Fold(total)
        for lr in range(self.logical_world_size):
            w, s = where[lr]
            fold.offer(lr, out[w, s, : self.n])
        return out[:, 0, self.n :]


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
