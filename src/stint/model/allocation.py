"""Allocations (where a job's workers and PSs run) and plans (what a policy wants)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Allocation:
    """Per-node worker and PS counts, as sorted ``(node_index, count)`` pairs with count > 0."""

    workers: tuple[tuple[int, int], ...] = ()
    ps: tuple[tuple[int, int], ...] = ()
    # Derived once (policies ask for it in every pass, for every job): not compared, not given.
    num_workers: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_workers", sum(c for _, c in self.workers))

    @staticmethod
    def of(workers: dict[int, int], ps: dict[int, int] | None = None) -> Allocation:
        """Build from ``{node_index: count}`` maps, dropping zero counts."""
        w = tuple(sorted((n, c) for n, c in workers.items() if c > 0))
        p = tuple(sorted((n, c) for n, c in (ps or {}).items() if c > 0))
        return Allocation(w, p)

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


class WaitCode(StrEnum):
    """Why a job the policy does not run waits: a small fixed vocabulary (with a detail text)."""

    CAPACITY = "capacity"  # it does not fit on the free GPUs ("needs 4 GPUs, 3 free")
    BEHIND = "behind"  # jobs ahead of it in the policy's order wait first (head of line)
    PREEMPTED = "preempted"  # the policy took its GPUs for another job
    ADMITTED = "admitted"  # admitted for a later slot (OASiS)
    PINNED = "pinned"  # an operator pin waits for its placement
    HELD = "held"  # it would fit on the free GPUs, but the policy starts others or keeps it back


@dataclass(frozen=True, slots=True)
class Wait:
    """A waiting job's reason: ``code`` from the vocabulary, ``detail`` for people."""

    code: WaitCode
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


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
    ``waiting`` maps jobs the policy does not run to why they wait (``Wait``); policies fill it
    when the view asks (``ClusterView.explain``, set live), since it costs a string per job.
    """

    allocations: dict[str, Allocation] = field(default_factory=dict)
    reject: dict[str, str] = field(default_factory=dict)
    explain: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, Wait] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.allocations or self.reject)
