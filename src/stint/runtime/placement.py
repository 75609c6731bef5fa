"""Concrete placement for the live system: free GPUs per node, accelerator slots, and the nodes an
operator-pinned job should use. Pure functions of plain data (no store, no clock)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from stint.model.allocation import Allocation


def fits(alloc: Allocation, free: Sequence[int]) -> bool:
    """True if every node of ``alloc`` exists and has at least as many free GPUs as it needs."""
    return all(0 <= n < len(free) and c <= free[n] for n, c in alloc.workers)


def take(free: list[int], alloc: Allocation) -> None:
    for n, c in alloc.workers:
        free[n] -= c


def give(free: list[int], alloc: Allocation) -> None:
    for n, c in alloc.workers:
        free[n] += c


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
