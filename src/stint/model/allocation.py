"""Allocations (where a job's workers and PSs run) and plans (what a policy wants)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Allocation:
    """Per-node worker and PS counts, as sorted ``(node_index, count)`` pairs with count > 0."""

    workers: tuple[tuple[int, int], ...] = ()
    ps: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(workers: dict[int, int], ps: dict[int, int] | None = None) -> Allocation:
        """Build from ``{node_index: count}`` maps, dropping zero counts."""
        w = tuple(sorted((n, c) for n, c in workers.items() if c > 0))
        p = tuple(sorted((n, c) for n, c in (ps or {}).items() if c > 0))
        return Allocation(w, p)

    @property
    def num_workers(self) -> int:
        return sum(c for _, c in self.workers)

    @property
    def num_ps(self) -> int:
        return sum(c for _, c in self.ps)

    @property
    def num_nodes(self) -> int:
        return len(self.workers)

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(n for n, _ in self.workers)

    def __bool__(self) -> bool:
        return bool(self.workers)


EMPTY = Allocation()


@dataclass(slots=True)
class Plan:
    """A policy's decision at one instant.

    ``allocations`` maps job ids to the allocation each should have *now*. A job that is not
    mentioned keeps its current allocation (plans are diffs, so that a policy that changes nothing
    returns an empty plan in O(1)); ``EMPTY`` stops a job (preemption). Giving a queued job an
    allocation admits it. ``reject`` maps job ids to a reason: those jobs leave the system with
    zero utility. Jobs neither allocated nor rejected stay queued (deferred).
    A planning policy (OASiS) that committed later allocations re-issues each slot's allocations
    in the plan of that slot's tick (``Policy.tick_s``): plans are only ever about *now*.
    ``explain`` maps job ids to a short account of what the policy decided for them and why
    (OASiS: the admission and the committed schedule); the live control plane stores the latest
    one on the job and shows it (``stint show``). It changes nothing by itself.
    """

    allocations: dict[str, Allocation] = field(default_factory=dict)
    reject: dict[str, str] = field(default_factory=dict)
    explain: dict[str, str] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.allocations or self.reject)
