"""From worker counts to concrete nodes: consolidated (fewest nodes) and spread placement, the
live controller's pinned placement (``pack``) and accelerator slots (``assign_slots``).

All work on a list of free GPUs per node, which they do not modify; callers subtract the result
with ``take``. Workers here hold ``gpus_per_worker`` GPUs each and never straddle nodes. (The
capacity of every resource, per node, is kept by ``placement.ledger``; these are the GPU-count
helpers that policies and the controller place with.)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, MutableSequence, Sequence
from typing import TYPE_CHECKING

from stint.model.allocation import EMPTY, Allocation
from stint.model.job import JobSpec
from stint.placement.free_index import RoomFree, ScratchFree

if TYPE_CHECKING:
    import numpy as np

Placement = dict[int, int]  # node index -> workers


def consolidated(free: Sequence[int], workers: int, gpus_per_worker: int = 1) -> Placement | None:
    """Fewest nodes: best-fit on one node if possible, else fill the emptiest nodes first.

    Best fit (the node with the least free capacity that still fits) keeps large holes for large
    jobs, as Tiresias' consolidation does. Returns None if the cluster cannot host the job.
    On a ``ScratchFree`` the same nodes are found from the ledger's free index, without a scan;
    on a ``RoomFree`` from its nodes by free GPUs.
    """
    need = workers * gpus_per_worker
    if isinstance(free, (ScratchFree, RoomFree)) and gpus_per_worker >= 1 and need >= 1:
        if isinstance(free, RoomFree) and need > free.total:
            return None
        node = free.best_fit(need)
        return {node: workers} if node >= 0 else free.emptiest(workers, gpus_per_worker)
    if need > 0 and need > sum(free):  # (sum and max run in C; a congested pass places often)
        return None
    best = _best_fit(free, need) if need <= 0 or max(free, default=-1) >= need else -1
    return {best: workers} if best >= 0 else emptiest(free, workers, gpus_per_worker)


def _best_fit(free: Sequence[int], need: int) -> int:
    """The node with the least free GPUs that still fit ``need``, the lowest index among equals;
    -1 if none."""
    best, best_free = -1, 1 << 30
    for i, f in enumerate(free):
        if need <= f < best_free:
            best, best_free = i, f
    return best


def spread(free: Sequence[int], workers: int, gpus_per_worker: int = 1) -> Placement | None:
    """One worker per node in turn, emptiest nodes first (balances load; more nodes per job)."""
    order = sorted((i for i in range(len(free)) if free[i] >= gpus_per_worker), key=lambda i: -free[i])
    room = {i: free[i] // gpus_per_worker for i in order}
    if sum(room.values()) < workers:
        return None
    out: Placement = {}
    left = workers
    while left:
        for i in order:
            if left and room[i] > 0:
                room[i] -= 1
                out[i] = out.get(i, 0) + 1
                left -= 1
    return out


def emptiest(free: Sequence[int], workers: int, gpus_per_worker: int = 1) -> Placement | None:
    """Fill the nodes with the most free GPUs first (Pollux's simulator places Tiresias jobs so)."""
    if isinstance(free, (ScratchFree, RoomFree)) and gpus_per_worker >= 1:
        return free.emptiest(workers, gpus_per_worker)
    # Most free first, ties by index (a stable sort, reverse included); nodes with no room for a
    # worker would take none.
    room = [i for i, f in enumerate(free) if f >= gpus_per_worker] if gpus_per_worker > 0 else range(len(free))
    return in_order(free, workers, gpus_per_worker, sorted(room, key=free.__getitem__, reverse=True))


def in_order(free: Sequence[int], workers: int, gpw: int, order: Sequence[int]) -> Placement | None:
    """As many workers as fit on each node of ``order`` in turn; None if they do not all fit."""
    out: Placement = {}
    left = workers
    for i in order:
        k = min(left, free[i] // gpw)
        if k > 0:
            out[i] = k
            left -= k
            if not left:
                return out
    return None


STRATEGIES = {"consolidated": consolidated, "spread": spread, "emptiest": emptiest}


def place(
    free: Sequence[int], workers: int, gpus_per_worker: int = 1, strategy: str = "consolidated"
) -> Placement | None:
    """Place ``workers`` with the named strategy; None if they do not fit."""
    try:
        fn = STRATEGIES[strategy]
    except KeyError:
        raise ValueError(f"unknown placement {strategy!r}; valid: {', '.join(STRATEGIES)}") from None
    return fn(free, workers, gpus_per_worker)


def take(free: MutableSequence[int], placement: Placement | Allocation, gpus_per_worker: int = 1) -> None:
    """Subtract a placement's (or an allocation's workers') GPUs from ``free`` in place."""
    pairs = placement.workers if isinstance(placement, Allocation) else placement.items()
    for i, k in pairs:
        free[i] -= k * gpus_per_worker


def give(free: MutableSequence[int], placement: Placement | Allocation, gpus_per_worker: int = 1) -> None:
    """Return a placement's (or an allocation's workers') GPUs to ``free`` in place."""
    pairs = placement.workers if isinstance(placement, Allocation) else placement.items()
    for i, k in pairs:
        free[i] += k * gpus_per_worker


def fits(alloc: Allocation, free: Sequence[int], gpus_per_worker: int = 1) -> bool:
    """True if every node of ``alloc`` exists and has the free GPUs its workers need."""
    return all(0 <= n < len(free) and c * gpus_per_worker <= free[n] for n, c in alloc.workers)


def pack(count: int, avail: Sequence[int], prefer: Iterable[int] = ()) -> Allocation | None:
    """``count`` one-GPU workers on the ``prefer`` nodes first (in order), then on the nodes with
    the most available GPUs (ties: lower index). None if they do not fit at all."""
    left = list(avail)
    chosen: dict[int, int] = {}
    order = list(dict.fromkeys(prefer))
    order += sorted((i for i in range(len(left)) if i not in order), key=lambda i: (-left[i], i))
    for node in order:
        if count == 0:
            break
        k = min(count, max(0, left[node]))
        if k:
            chosen[node] = k
            count -= k
    return Allocation.of(chosen) if count == 0 else None


def assign_slots(
    alloc: Allocation, capacity: Sequence[int], held: Iterable[dict[int, list[int]]]
) -> dict[int, list[int]]:
    """Lowest free accelerator slots on each node of ``alloc``, given the slots ``held`` by the
    jobs that hold GPUs now. Raises ValueError if a node has too few (a controller bug)."""
    used: dict[int, set[int]] = {}
    for slots in held:
        for node, ss in slots.items():
            used.setdefault(int(node), set()).update(ss)
    out: dict[int, list[int]] = {}
    for node, count in alloc.workers:
        free = [s for s in range(capacity[node]) if s not in used.get(node, set())]
        if len(free) < count:
            raise ValueError(f"node {node}: {count} slots wanted, {len(free)} free")
        out[node] = free[:count]
    return out


def trim_to_feasible(spec: JobSpec, alloc: Allocation) -> Allocation:
    """``alloc`` with workers removed (from the nodes holding fewest first) down to the largest
    count the job can run on; EMPTY if there is none. For policies that size jobs one worker at
    a time: trimming only frees capacity, so a plan that fitted still fits."""
    n = alloc.num_workers
    keep = spec.largest_feasible(n)
    if keep == n:
        return alloc
    if keep == 0:
        return EMPTY
    return Allocation.of(drop_workers(alloc, n - keep), dict(alloc.ps))


def drop_workers(alloc: Allocation, drop: int) -> dict[int, int]:
    """``alloc``'s workers per node less ``drop`` of them, taken from the nodes holding fewest
    first (ties: lowest node index), so the job stays as consolidated as it can."""
    counts = dict(alloc.workers)
    for node in sorted(counts, key=lambda i: (counts[i], i)):
        if drop <= 0:
            break
        k = min(drop, counts[node])
        counts[node] -= k
        drop -= k
    return counts


def pack_vectors(free: np.ndarray, d: np.ndarray, k: int) -> dict[int, int] | None:
    """``k`` copies of demand vector ``d`` on free vectors per node (every resource checked):
    best fit on one node if possible, else roomiest nodes first; commits to ``free``.

    ``room[i]`` is how many copies of ``d`` node i still holds: the minimum over the resources
    the demand uses of free / demand (vectorised over nodes).
    """
    import numpy as np  # DRF's vectors only: other policies never import NumPy for placement

    if k <= 0:
        return {}
    used = d > 0
    if not used.any():
        return {0: k}  # a demand of nothing fits anywhere
    room = np.floor((free[:, used] + 1e-9) / d[used]).min(axis=1).clip(0, k).astype(int)
    one = np.flatnonzero(room >= k)
    if len(one):
        best = int(one[np.argmin(free[one, 0])])
        out = {best: k}
    else:
        out, left = {}, k
        for i in np.argsort(-room, kind="stable"):
            if not left or room[i] == 0:
                break
            out[int(i)] = take = int(min(room[i], left))
            left -= take
        if left:
            return None
    for i, n in out.items():
        free[i] -= n * d
    return out


@functools.lru_cache(maxsize=4096)
def packed(workers: int, per_node: int) -> Allocation:
    """``workers`` on the fewest nodes of ``per_node`` slots each (nodes 0, 1, ...: full nodes,
    then the rest): the placement a job would get alone on an empty cluster of such nodes.
    (Cached: an ``Allocation`` is immutable, and policies ask for the same few at every job.)"""
    full, rest = divmod(workers, per_node)
    nodes = dict.fromkeys(range(full), per_node)
    if rest:
        nodes[full] = rest
    return Allocation.of(nodes)
