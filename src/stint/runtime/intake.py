"""Group commit of job submissions: concurrent ``POST /v1/jobs`` share one transaction.

Each submission used to be its own transaction: its own write lock (SQLite), its own commit and
WAL flush, and a hop to the thread pool. The ``Intake`` queues them instead. One writer at a time
(an asyncio task, started by the first submission that finds none running) takes every queued
submission, checks each against its owner's limits (``UsageBook``: a refusal fails that one
alone), inserts the rest in one transaction (``Store.insert_jobs``) on the thread pool, and only
once it has committed answers them all. Submissions arriving meanwhile wait for the next batch,
so a burst costs one commit per batch instead of one per job, and nothing is acknowledged before
it is durable: a crash loses only submissions that were never answered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from stint.runtime.store import Caller, NewJob, Store
from stint.runtime.tables import Job
from stint.runtime.usage import Check

MAX_BATCH = 512  # submissions per transaction (more wait for the next one)


@dataclass(slots=True)
class _Pending:
    spec: NewJob
    caller: Caller
    now: float
    check: Check | None
    answer: asyncio.Future[Job]
    outcome: Job | BaseException | None = None  # set by the writer, delivered on the loop


class Intake:
    """Queues submissions and writes them in batches (see the module's docstring)."""

    def __init__(self, store: Store, max_batch: int = MAX_BATCH) -> None:
        self.store = store
        self.max_batch = max_batch
        self.batches = 0  # transactions written (a figure for tests and benchmarks)
        self._queue: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None

    async def add_job(self, spec: NewJob, caller: Caller, now: float,
                      check: Check | None = None) -> Job:
        """The job as stored, once committed; raises what ``check`` raises (the job is then not
        stored) or what the store raised (nor is it)."""
        answer: asyncio.Future[Job] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(spec, caller, now, check, answer))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all())
        return await answer

    async def _write_all(self) -> None:
        """Write batches until the queue is empty (the event loop's own task)."""
        while self._queue:
            batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            try:
                await run_in_threadpool(self._write, batch)
            except BaseException:  # cancelled (the server stops): none of them is answered
                for p in batch:
                    p.answer.cancel()
                raise
            _deliver(batch)

    def _write(self, batch: list[_Pending]) -> None:
        """On the thread pool: each submission's limits, then the accepted ones in one
        transaction. Sets every submission's ``outcome``."""
        usage = self.store.usage
        accepted = []
        for p in batch:
            if p.check is None:
                accepted.append(p)
                continue
            try:
                usage.reserve(p.caller.user_id, 1, p.spec.max_gpus, p.check)
            except Exception as exc:  # noqa: BLE001 - raised by its own request (a refusal)
                p.outcome = exc
            else:
                accepted.append(p)
        try:
            jobs = self.store.insert_jobs([(p.spec, p.caller, p.now) for p in accepted])
        except Exception as exc:  # noqa: BLE001 - raised by each request of the batch
            for p in accepted:
                p.outcome = exc
                if p.check is not None:
                    usage.release(p.caller.user_id, 1, p.spec.max_gpus)
            return
        self.batches += 1
        for p, job in zip(accepted, jobs, strict=True):
            p.outcome = job
            if p.check is not None:
                usage.done(p.caller.user_id, 1, p.spec.max_gpus)


def _deliver(batch: list[_Pending]) -> None:
    """Answer each waiting submission with its outcome (one whose client left is skipped)."""
    for p in batch:
        if p.answer.done():
            continue
        if isinstance(p.outcome, BaseException):
            p.answer.set_exception(p.outcome)
        elif p.outcome is None:
            p.answer.set_exception(RuntimeError("the submission was not written"))
        else:
            p.answer.set_result(p.outcome)
