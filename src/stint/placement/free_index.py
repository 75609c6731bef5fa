"""Nodes bucketed by free GPUs, kept current by the ``Ledger``, so placement need not scan nodes.

``FreeIndex`` holds, for every free-GPU count g >= 1 up to the largest node, the nodes with
exactly g free GPUs in index order (a bisect-sorted list per count), and the total of free GPUs.
The ledger updates it on every ``take``/``give``/``set_down`` (one bucket move per node touched);
policies read it through ``ClusterView.free_index``.

``ScratchFree`` is a policy's scratch copy of the free GPUs for one pass: the ledger's list and
index, read-only, plus the nodes the pass changed (copy on write). ``best_fit`` and
``emptiest`` on it answer exactly as ``packing.consolidated``/``packing.emptiest`` scanning the
same free list would (least free GPUs that fit, then lowest index; most free first, ties by lower
index), in time bounded by the GPUs per node, the nodes the pass changed and the nodes returned,
not by the size of the cluster.

``RoomFree`` is a plain free list that also keeps its nodes by free GPUs and its total, so that
placing on it looks only at the counts present and the nodes it takes.
"""

from __future__ import annotations

import heapq
import operator
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from typing import SupportsIndex, overload


class FreeIndex:
    """For each free-GPU count 1..``top``, the nodes with that many free GPUs, in index order."""

    def __init__(self, free_gpus: Sequence[int], top: int) -> None:
        self.top = max(top, 0)
        self.buckets: list[list[int]] = [[] for _ in range(self.top + 1)]  # bucket 0 stays empty
        self.total = 0  # sum of free GPUs over all nodes (as ``sum(free_gpus)``)
        for node, g in enumerate(free_gpus):
            self.total += g
            if g > 0:
                self.buckets[min(g, self.top)].append(node)

    def copy(self) -> FreeIndex:
        other = FreeIndex.__new__(FreeIndex)
        other.top, other.total = self.top, self.total
        other.buckets = [list(b) for b in self.buckets]
        return other

    def move(self, node: int, old: int, new: int) -> None:
        """Node ``node``'s free GPUs went from ``old`` to ``new``."""
        self.total += new - old
        if old > 0:
            bucket = self.buckets[min(old, self.top)]
            del bucket[bisect_left(bucket, node)]
        if new > 0:
            insort(self.buckets[min(new, self.top)], node)

    def best_fit(self, need: int, skip: dict[int, int]) -> tuple[int, int] | None:
        """(free, node) of the node with the fewest free GPUs >= ``need`` (then lowest index),
        ignoring the nodes in ``skip``; None if there is none."""
        for g in range(max(need, 1), self.top + 1):
            for node in self.buckets[g]:
                if node not in skip:
                    return g, node
        return None

    def descending(self, skip: dict[int, int]) -> Iterator[tuple[int, int]]:
        """(-free, node) for nodes with free GPUs, most free first, then lowest index; ``skip``
        left out. Lazy: a caller that stops early pays only for what it read."""
        for g in range(self.top, 0, -1):
            for node in self.buckets[g]:
                if node not in skip:
                    yield -g, node


class ScratchFree(MutableSequence[int]):
    """A copy-on-write view of free GPUs per node for one scheduling pass (fixed length)."""

    def __init__(self, base: Sequence[int], index: FreeIndex) -> None:
        self.base = base
        self.by_free = index
        self.over: dict[int, int] = {}  # node -> free GPUs after this pass's changes
        self.total = index.total

    def __len__(self) -> int:
        return len(self.base)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        got = self.over.get(i)
        return self.base[i] if got is None else got

    @overload
    def __setitem__(self, i: int, value: int) -> None: ...
    @overload
    def __setitem__(self, i: slice, value: object) -> None: ...
    def __setitem__(self, i: int | slice, value: object) -> None:
        if not isinstance(i, int) or not isinstance(value, int):
            raise TypeError("ScratchFree takes one node's free GPUs at a time")
        self.total += value - self[i]
        self.over[i] = value

    def __delitem__(self, i: int | slice) -> None:
        raise TypeError("ScratchFree has one entry per node; nodes cannot be removed")

    def insert(self, index: int, value: int) -> None:
        raise TypeError("ScratchFree has one entry per node; nodes cannot be added")

    def best_fit(self, need: int) -> int:
        """The node ``packing.consolidated``'s best-fit scan would pick for ``need`` GPUs; -1."""
        best = self.by_free.best_fit(need, self.over)
        for node, g in self.over.items():
            if g >= need and (best is None or (g, node) < best):
                best = (g, node)
        return -1 if best is None else best[1]

    def emptiest(self, workers: int, gpw: int) -> dict[int, int] | None:
        """``packing.emptiest``'s placement: as many workers as fit on each node, most free
        GPUs first (ties: lower index); None if they do not all fit."""
        mine = sorted((-g, node) for node, g in self.over.items() if g > 0)
        return fill(heapq.merge(self.by_free.descending(self.over), mine), workers, gpw)


class RoomFree(list[int]):
    """Free GPUs per node (a plain list to read) that also keeps the nodes by free GPUs (a set
    per count above 0) and the total: placement on it (``best_fit``, ``emptiest``) looks only
    at the counts present and the nodes it returns, and finds what ``packing.consolidated`` and
    ``packing.emptiest`` scanning every node would (a node with no GPU free never takes a worker;
    with fewer GPUs free in all than asked, nothing fits). For a staging that frees GPUs one
    victim at a time and tries to place after each."""

    def __init__(self, free: Iterable[int]) -> None:
        super().__init__(free)
        self._index()

    def _index(self) -> None:
        self.by_free: dict[int, set[int]] = {}
        self.total = 0
        for i, f in enumerate(self):
            if f > 0:
                self.by_free.setdefault(f, set()).add(i)
                self.total += f

    @overload
    def __setitem__(self, i: SupportsIndex, value: int) -> None: ...
    @overload
    def __setitem__(self, i: slice, value: Iterable[int]) -> None: ...
    def __setitem__(self, i: SupportsIndex | slice, value: int | Iterable[int]) -> None:
        if isinstance(i, slice):
            super().__setitem__(i, value)  # type: ignore[assignment]
            self._index()
            return
        j = operator.index(i)
        j = j + len(self) if j < 0 else j
        old = self[j]
        super().__setitem__(j, value)  # type: ignore[assignment]
        new = self[j]
        if old > 0:
            self.total -= old
            bucket = self.by_free[old]
            bucket.discard(j)
            if not bucket:
                del self.by_free[old]
        if new > 0:
            self.total += new
            self.by_free.setdefault(new, set()).add(j)

    def best_fit(self, need: int) -> int:
        """The node with the least free GPUs that still fit ``need`` (>= 1), the lowest index
        among equals; -1 if none."""
        fits = [g for g in self.by_free if g >= need]
        return min(self.by_free[min(fits)]) if fits else -1

    def emptiest(self, workers: int, gpw: int) -> dict[int, int] | None:
        """``packing.emptiest``'s placement (``gpw`` >= 1): as many workers as fit on each node,
        most free GPUs first (ties: lower index); None if they do not all fit."""
        if workers * gpw > self.total:
            return None
        return fill(((-g, node) for g in sorted(self.by_free, reverse=True) for node in sorted(self.by_free[g])),
                    workers, gpw)


def fill(nodes: Iterable[tuple[int, int]], workers: int, gpw: int) -> dict[int, int] | None:
    """As many workers as fit on each node of ``nodes`` (minus its free GPUs, node), most free
    first; None if they do not all fit."""
    out: dict[int, int] = {}
    left = workers
    for neg, node in nodes:
        k = min(left, -neg // gpw)
        if k <= 0:
            return None  # every node after this one has fewer free GPUs still
        out[node] = k
        left -= k
        if not left:
            return out
    return None
