"""Per-user usage (unfinished jobs, the sum of their ``max_gpus``) kept between submissions.

Counting a user's unfinished jobs costs a query that grows with the queue (several ms at a few
thousand queued jobs), and every submission needs it for the per-user limits. The book keeps, per
user, an upper bound instead: the count read from the store plus every submission reserved since
the read began. Jobs that finish only lower the true usage, so the bound is never below it; it is
re-read when it is older than ``max_age_s`` and whenever it would refuse a submission, so a
refusal is always decided on a fresh count. The reservation and the check are one step under a
lock: two concurrent submissions cannot both take the last place.

It is exact for one process, the one that holds the store (``Store.lock``): submissions made by
another process are not in the bound until it is next re-read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Count = Callable[[int], tuple[int, int]]  # user id -> (unfinished jobs, their max_gpus)
Check = Callable[[tuple[int, int]], None]  # raises if usage (jobs, gpus) refuses the request


@dataclass(slots=True)
class _Entry:
    jobs: int
    gpus: int
    read_at: float  # monotonic time the count it builds on was read


@dataclass(slots=True)
class _Reserved:
    """Reservations of one user since the book started (monotonic totals)."""

    jobs: int = 0
    gpus: int = 0
    live_jobs: int = 0  # not yet committed or released
    live_gpus: int = 0


class UsageBook:
    def __init__(self, count: Count, max_age_s: float = 2.0) -> None:
        self._count = count
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}
        self._reserved: dict[int, _Reserved] = {}

    def reserve(self, user_id: int, jobs: int, gpus: int, check: Check) -> None:
        """Check ``user_id``'s usage with ``check`` and reserve ``jobs`` more jobs of ``gpus``
        GPUs in all; ``done`` or ``release`` must follow. Raises what ``check`` raises, after a
        fresh count."""
        for fresh in (False, True):
            entry = self._current(user_id, fresh)
            with self._lock:
                if self._entries.get(user_id) is not entry:
                    continue  # re-read meanwhile: take the newer one (the fresh pass reads again)
                try:
                    check((entry.jobs, entry.gpus))
                except Exception:
                    if fresh:
                        raise
                    continue
                entry.jobs += jobs
                entry.gpus += gpus
                r = self._reserved.setdefault(user_id, _Reserved())
                r.jobs, r.gpus = r.jobs + jobs, r.gpus + gpus
                r.live_jobs, r.live_gpus = r.live_jobs + jobs, r.live_gpus + gpus
                return
        # Two re-reads raced with this one: decide on a count of its own.
        with self._lock:
            r = self._reserved.setdefault(user_id, _Reserved())
            check(self._count(user_id))
            r.jobs, r.gpus = r.jobs + jobs, r.gpus + gpus
            r.live_jobs, r.live_gpus = r.live_jobs + jobs, r.live_gpus + gpus
            kept = self._entries.get(user_id)
            if kept is not None:
                kept.jobs, kept.gpus = kept.jobs + jobs, kept.gpus + gpus

    def done(self, user_id: int, jobs: int, gpus: int) -> None:
        """The reserved jobs are committed (the store counts them from now on)."""
        with self._lock:
            r = self._reserved[user_id]
            r.live_jobs, r.live_gpus = r.live_jobs - jobs, r.live_gpus - gpus

    def release(self, user_id: int, jobs: int, gpus: int) -> None:
        """The reserved jobs were not stored: give their place back."""
        with self._lock:
            r = self._reserved[user_id]
            r.live_jobs, r.live_gpus = r.live_jobs - jobs, r.live_gpus - gpus
            r.jobs, r.gpus = r.jobs - jobs, r.gpus - gpus
            entry = self._entries.get(user_id)
            if entry is not None:
                entry.jobs, entry.gpus = entry.jobs - jobs, entry.gpus - gpus

    def forget(self) -> None:
        """Re-read every user's count at its next submission."""
        with self._lock:
            self._entries.clear()

    def _current(self, user_id: int, fresh: bool) -> _Entry:
        with self._lock:
            entry = self._entries.get(user_id)
            if entry is not None and not fresh and time.monotonic() - entry.read_at < self.max_age_s:
                return entry
            r = self._reserved.setdefault(user_id, _Reserved())
            live = (r.live_jobs, r.live_gpus)
            before = (r.jobs, r.gpus)
            started = time.monotonic()
        jobs, gpus = self._count(user_id)  # outside the lock: other users go on meanwhile
        with self._lock:
            # In flight when the read began, or reserved since: the read may have missed them
            # (counting one twice only makes the bound higher).
            entry = _Entry(jobs + live[0] + r.jobs - before[0],
                           gpus + live[1] + r.gpus - before[1], started)
            self._entries[user_id] = entry
            return entry
