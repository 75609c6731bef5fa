"""The store: migrations agree with the ORM, lifecycle edges are enforced, placement helpers."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from stint.model.allocation import Allocation
from stint.placement.packing import assign_slots, fits, pack
from stint.runtime.states import TERMINAL, IllegalTransition, JobState, allowed, check_transition
from stint.runtime.store import Store
from stint.runtime.tables import Base


def test_migrations_create_exactly_the_orm_schema(store: Store) -> None:
    store.migrate()  # a second run is a no-op
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_every_state_is_reachable_from_queued_and_terminal_states_are_final() -> None:
    seen, todo = {JobState.QUEUED}, [JobState.QUEUED]
    while todo:
        for dst in allowed(todo.pop()):
            if dst not in seen:
                seen.add(dst)
                todo.append(dst)
    assert seen == set(JobState)
    assert all(not allowed(s) for s in TERMINAL)


@pytest.mark.parametrize(
    ("src", "dst"),
    [("queued", "running"), ("succeeded", "running"), ("preempted", "running"),
     ("running", "queued"), ("checkpointing", "starting")],
)
def test_illegal_transitions_raise(src: str, dst: str) -> None:
    with pytest.raises(IllegalTransition, match=f"{src} -> {dst}"):
        check_transition("7", JobState(src), JobState(dst))


def test_pack_prefers_the_given_nodes_then_the_emptiest() -> None:
    assert pack(2, [1, 2, 2], prefer=[0]) == Allocation.of({0: 1, 1: 1})
    assert pack(2, [1, 1, 2]) == Allocation.of({2: 2})
    assert pack(5, [1, 1, 2]) is None
    assert fits(Allocation.of({1: 2}), [0, 2]) and not fits(Allocation.of({2: 1}), [0, 2])


def test_slots_avoid_those_held_by_other_jobs() -> None:
    held = [{0: [0]}, {1: [1]}]
    assert assign_slots(Allocation.of({0: 1, 1: 1}), [2, 2], held) == {0: [1], 1: [0]}
    with pytest.raises(ValueError, match="node 0"):
        assign_slots(Allocation.of({0: 2}), [2, 2], held)


def test_token_lookups_are_remembered_until_a_token_changes(store: Store) -> None:
    alice = store.create_token("alice", 1.0)
    assert store.cached_caller(alice) is None  # not looked up yet
    who = store.caller_for_token(alice)
    assert who is not None and who.name == "alice"
    assert store.cached_caller(alice) == who  # the next request needs no query
    assert store.caller_for_token("not-a-token") is None
    assert store.cached_caller("not-a-token") is None  # failures are never remembered
    store.create_token("bob", 2.0)  # any token change forgets every remembered lookup
    assert store.cached_caller(alice) is None
    assert store.caller_for_token(alice) == who
    new = store.create_token("alice", 3.0)  # replaces alice's token: the old one fails at once
    assert store.caller_for_token(alice) is None
    assert store.caller_for_token(new) == who


def test_every_stop_purpose_has_a_strength_and_a_move_outranks_a_plans_stop() -> None:
    """A stop in progress keeps its purpose unless a stronger one comes: every purpose must be
    ranked (a move to another cluster had none, so a resize during it took it over)."""
    from stint.runtime.states import STOP_STRENGTH, StopPurpose

    assert set(STOP_STRENGTH) == set(StopPurpose)
    p = StopPurpose
    assert STOP_STRENGTH[p.MOVE] > max(STOP_STRENGTH[x] for x in (p.RESIZE, p.MIGRATE, p.PREEMPT))
    assert STOP_STRENGTH[p.CANCEL] > max(v for k, v in STOP_STRENGTH.items() if k is not p.CANCEL)
