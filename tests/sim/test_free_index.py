"""The free-capacity index (``placement.free_index``): the same placements as the scans it
replaces, kept exact by the ledger, and whole simulations with identical records either way."""

from __future__ import annotations

import dataclasses
import random

import pytest

from stint.model import Allocation, Cluster, JobSpec, Plan
from stint.placement.free_index import FreeIndex, RoomFree, ScratchFree
from stint.placement.ledger import Ledger
from stint.placement.packing import consolidated, emptiest, give, place, take
from stint.policies import make
from stint.policies.base import ClusterView, Policy, PolicyBase
from stint.sim.costs import CostModel
from stint.sim.engine import NodeFailure, Simulator
from stint.sim.metrics import JobRecord
from stint.sim.traces import Filters, load


def _scratch(rng: random.Random, nodes: int, per_node: int) -> tuple[list[int], ScratchFree]:
    """A random free vector and a ScratchFree over a random base with random writes on top."""
    base = [rng.randint(0, per_node) for _ in range(nodes)]
    scratch = ScratchFree(base, FreeIndex(base, per_node))
    plain = list(base)
    for _ in range(rng.randint(0, nodes)):
        i, v = rng.randrange(nodes), rng.randint(0, per_node)
        scratch[i] = plain[i] = v
    return plain, scratch


@pytest.mark.parametrize("seed", range(40))
def test_index_placement_picks_the_same_nodes_as_the_scan(seed: int) -> None:
    rng = random.Random(seed)
    plain, scratch = _scratch(rng, rng.randint(1, 40), rng.choice([1, 4, 8]))
    assert list(scratch) == plain and scratch.total == sum(plain)
    for _ in range(30):
        gpw = rng.choice([1, 1, 2, 4])
        workers = rng.randint(0, 12)
        assert consolidated(scratch, workers, gpw) == consolidated(plain, workers, gpw)
        assert emptiest(scratch, workers, gpw) == emptiest(plain, workers, gpw)
        got = place(plain, workers, gpw)
        if got is not None:  # a pass goes on from the placement it made
            take(scratch, got, gpw)
            take(plain, got, gpw)
            assert list(scratch) == plain and scratch.total == sum(plain)
            if rng.random() < 0.3:
                give(scratch, got, gpw)
                give(plain, got, gpw)


@pytest.mark.parametrize("seed", range(40))
def test_placement_on_the_nodes_with_room_picks_the_same_nodes_as_the_scan(seed: int) -> None:
    # RoomFree keeps its nodes by free GPUs and its total; consolidated and emptiest read only those.
    rng = random.Random(seed)
    plain = [rng.choice([0, 0, 0, 1, 2, 4, 8]) for _ in range(rng.randint(1, 40))]
    room = RoomFree(plain)
    for _ in range(30):
        gpw = rng.choice([1, 1, 2, 4])
        workers = rng.randint(0, 12)
        for fn in (consolidated, emptiest):
            want, got = fn(plain, workers, gpw), fn(room, workers, gpw)
            assert got == want and (want is None or list(got or {}) == list(want))
        got = place(plain, workers, gpw)
        if got is not None:
            take(room, got, gpw)
            take(plain, got, gpw)
            if rng.random() < 0.3:
                give(room, got, gpw)
                give(plain, got, gpw)
        if rng.random() < 0.05:
            plain[:] = room[:] = [rng.choice([0, 8]) for _ in plain]
        buckets: dict[int, set[int]] = {}
        for i, f in enumerate(plain):
            if f > 0:
                buckets.setdefault(f, set()).add(i)
        assert room == plain and room.by_free == buckets and room.total == sum(plain)


def test_scratch_writes_never_reach_the_ledger() -> None:
    ledger = Ledger(Cluster.uniform(3, 4))
    scratch = ScratchFree(ledger.free_gpus, ledger.by_free)
    take(scratch, {1: 3})
    assert scratch[1] == 1 and ledger.free_gpus == [4, 4, 4] and ledger.by_free.total == 12
    assert consolidated(scratch, 1) == {1: 1}  # best fit sees the pass's own change


def _index_of(free: list[int], top: int) -> tuple[list[list[int]], int]:
    fresh = FreeIndex(free, top)
    return fresh.buckets, fresh.total


def test_the_ledger_keeps_its_index_exact_through_take_give_and_failures() -> None:
    rng = random.Random(7)
    ledger = Ledger(Cluster.uniform(12, 8))
    held: list[tuple[JobSpec, Allocation]] = []
    for step in range(400):
        if held and (rng.random() < 0.45 or len(held) > 20):
            spec, alloc = held.pop(rng.randrange(len(held)))
            ledger.give(spec, alloc)
        else:
            spec = JobSpec(job_id=f"j{step}", arrival_s=0.0, work=1.0, requested_workers=1)
            got = consolidated(ledger.free_gpus, rng.randint(1, 12))
            if got is None:
                continue
            alloc = Allocation.of(got)
            assert ledger.shortfall(spec, alloc) is None
            ledger.take(spec, alloc)
            held.append((spec, alloc))
        if step % 50 == 49:  # a node with nothing on it goes down and comes back
            busy = {n for _, a in held for n in a.nodes}
            idle = [n for n in range(12) if n not in busy]
            if idle:
                ledger.set_down(idle[0], True)
                assert (ledger.by_free.buckets, ledger.by_free.total) == _index_of(ledger.free_gpus, 8)
                ledger.set_down(idle[0], False)
        assert (ledger.by_free.buckets, ledger.by_free.total) == _index_of(ledger.free_gpus, 8)
    copy = ledger.copy()
    copy.give(*held[0])
    assert (ledger.by_free.buckets, ledger.by_free.total) == _index_of(ledger.free_gpus, 8)


class _NoIndex(PolicyBase):
    """A policy seen through views without ``free_index``: the placement scans, as before."""

    def __init__(self, inner: Policy) -> None:
        self.inner, self.name, self.tick_s = inner, inner.name, inner.tick_s
        self.lazy_progress = inner.lazy_progress

    def next_due(self) -> float | None:
        return self.inner.next_due()

    def plan(self, view: ClusterView) -> Plan:
        return self.inner.plan(dataclasses.replace(view, free_index=None))


def _records(policy: Policy, trace_name: str) -> list[JobRecord]:
    if trace_name == "philly":
        trace = load("philly", seed=1, filters=Filters(limit=800))
        cluster, costs = Cluster.uniform(6, 8), CostModel()
    else:
        trace = load(trace_name, seed=1)
        cluster, costs = Cluster.uniform(16, 4), CostModel.pollux()
    failures = [NodeFailure(2, 3600.0, 9000.0)]
    return Simulator(cluster, trace.jobs, policy, trace.perf, costs, failures=failures).run().records


@pytest.mark.parametrize(("name", "options", "trace"), [
    ("fifo", {}, "philly"),
    ("tiresias", {}, "philly"),
    ("srtf", {}, "philly"),
    ("drf", {}, "philly"),
    ("drf", {}, "pollux:6"),
    ("tiresias", {"placement": "emptiest", "strict_order": True}, "pollux:6"),
])
@pytest.mark.slow
def test_records_are_identical_with_and_without_the_index(name: str, options: dict[str, object],
                                                          trace: str) -> None:
    with_index = _records(make(name, **options), trace)
    without = _records(_NoIndex(make(name, **options)), trace)
    assert with_index == without
    assert any(r.preemptions for r in with_index) or any(r.queue_s > 0 for r in with_index)
