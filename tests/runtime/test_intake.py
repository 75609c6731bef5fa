"""Group commit of submissions (``runtime.intake``): concurrent submissions share a transaction,
each is answered with its own job or its own refusal, and every acknowledged one survives a
SIGKILL of the control plane."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from rt_helpers import ServeProc, kill_leftover_workers, wait_for

from stint.runtime.client import ApiError
from stint.runtime.intake import Intake
from stint.runtime.store import Caller, NewJob, Store

SPEC = NewJob("t", ["true"], 1, 1, 1, "standard", 1.0, None)


def caller(store: Store, name: str) -> Caller:
    who = store.caller_for_token(store.create_token(name, time.time()))
    assert who is not None
    return who


def test_concurrent_submissions_share_transactions_and_keep_their_order(store: Store) -> None:
    alice = caller(store, "alice")
    intake = Intake(store)

    async def submit_all() -> list[int]:
        jobs = await asyncio.gather(*[intake.add_job(SPEC, alice, float(i)) for i in range(50)])
        return [j.id for j in jobs]

    ids = asyncio.run(submit_all())
    assert ids == sorted(ids) and len(set(ids)) == 50
    assert intake.batches < 50  # all but the first waited for one shared commit
    stored = {j.id: j for j in store.list_jobs(alice, limit=100)}
    assert sorted(stored) == ids
    assert [stored[i].submitted_at for i in ids] == [float(i) for i in range(50)]
    assert all(len(store.transitions(i)) == 1 for i in ids)
    assert store.live_usage(alice.user_id) == (50, 50)


def test_a_refusal_fails_its_own_submission_only(store: Store) -> None:
    alice, bob = caller(store, "alice"), caller(store, "bob")
    intake = Intake(store)

    def refuse_bob(usage: tuple[int, int]) -> None:
        raise PermissionError("bob may not")

    async def submit_both() -> list[object]:
        return await asyncio.gather(
            intake.add_job(SPEC, alice, 1.0), intake.add_job(SPEC, bob, 1.0, check=refuse_bob),
            intake.add_job(SPEC, alice, 1.0, check=lambda usage: None), return_exceptions=True)

    first, refused, third = asyncio.run(submit_both())
    assert isinstance(refused, PermissionError)
    assert [j.id for j in store.list_jobs(alice)] == [first.id, third.id]  # type: ignore[attr-defined]
    assert store.list_jobs(bob) == [] and store.live_usage(bob.user_id) == (0, 0)


@pytest.mark.slow
def test_every_acknowledged_submission_survives_a_sigkill(db_url: str, tmp_path: Path) -> None:
    serve = ServeProc(tmp_path / "data", db_url)
    serve.start()
    acked: list[int] = []
    stop = threading.Event()

    def submit_until_killed() -> None:
        with serve.client() as c:
            while not stop.is_set():
                try:
                    acked.append(c.submit(command=["sleep", "600"], gpus=4)["id"])
                except ApiError:  # the server died: not acknowledged
                    return

    threads = [threading.Thread(target=submit_until_killed) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 20, 120, "submissions to be acknowledged")
        serve.kill()  # (while the four go on submitting)
        stop.set()
        for t in threads:
            t.join(30)
        serve.start()
        with serve.client() as c:
            stored = {j["id"] for j in c.jobs()}
    finally:
        serve.stop()
        kill_leftover_workers(serve.data_dir)
    assert set(acked) <= stored, f"acknowledged and lost: {sorted(set(acked) - stored)[:10]}"
