"""Per-user usage kept between submissions (``UsageBook``): no count query per submission,
never below the true usage, and every refusal decided on a fresh count."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import update

from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.tables import Job
from stint.runtime.usage import UsageBook


class Refused(Exception):
    pass


def at_most(jobs: int) -> Callable[[tuple[int, int]], None]:
    def check(usage: tuple[int, int]) -> None:
        if usage[0] >= jobs:
            raise Refused(f"{usage[0]} unfinished")
    return check


@pytest.fixture
def alice(store: Store) -> Caller:
    caller = store.caller_for_token(store.create_token("alice", time.time()))
    assert caller is not None
    return caller


SPEC = NewJob("t", ["true"], 2, 2, 2, "standard", 1.0, None)


def test_a_submission_runs_no_count_query(store: Store, alice: Caller) -> None:
    counted: list[int] = []

    def count(user_id: int) -> tuple[int, int]:
        counted.append(user_id)
        return store.live_usage(user_id)

    store.usage = UsageBook(count)
    store.add_job(SPEC, alice, 1.0, check=at_most(100))  # the first one reads the count
    for _ in range(5):
        store.add_job(SPEC, alice, 2.0, check=at_most(100))
    assert counted == [alice.user_id]
    assert store.live_usage(alice.user_id) == (6, 12)


def test_the_limit_counts_jobs_not_yet_reread_and_rereads_before_refusing(
        store: Store, alice: Caller) -> None:
    for _ in range(3):
        store.add_job(SPEC, alice, 1.0, check=at_most(3))
    with pytest.raises(Refused, match="3 unfinished"):
        store.add_job(SPEC, alice, 1.0, check=at_most(3))
    with store.session() as s:  # one finishes (as the controller would record it)
        s.execute(update(Job).where(Job.id == 1).values(state="succeeded"))
    store.add_job(SPEC, alice, 1.0, check=at_most(3))  # the refusal re-reads: a place is free
    assert store.live_usage(alice.user_id) == (3, 6)


def test_concurrent_submissions_never_pass_the_limit(store: Store, alice: Caller) -> None:
    refused: list[Refused] = []
    start = threading.Barrier(8)

    def submit() -> None:
        start.wait()
        for _ in range(5):
            try:
                store.add_job(SPEC, alice, 1.0, check=at_most(20))
            except Refused as exc:
                refused.append(exc)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.live_usage(alice.user_id)[0] == 20 and len(refused) == 20


def test_a_failed_insert_gives_its_place_back(store: Store) -> None:
    ghost = Caller(999_999, "ghost", False)  # no such user: the foreign key refuses the row
    with pytest.raises(Exception, match="(?i)foreign key"):
        store.add_job(SPEC, ghost, 1.0, check=at_most(1))
    store.usage.max_age_s = 1e9  # no re-read: the book's own count is what a check sees
    seen: list[tuple[int, int]] = []
    store.usage.reserve(ghost.user_id, 1, 2, seen.append)
    assert seen == [(0, 0)]
