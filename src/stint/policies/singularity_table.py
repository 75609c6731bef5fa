"""Singularity's per-job constants as columns, for the walks a pass makes over many jobs.

Under contention a ``singularity`` pass puts the waiting jobs in serve order (rule 2) and the
running jobs in victim order (rule 3), and sums the drain time over every active job (rule 8).
Done one Python step per job, these walks were most of a pass in a congested cluster (a thousand
running jobs, a pass every few seconds).
Here each job's constants are a row of NumPy columns, added when the policy first sees the job
and dropped when it leaves, and a pass computes the quantities the two walks need for all of its
jobs at once from their progress (``work_done_at``, read from the statuses each pass: progress
is never cached, so a view whose statuses are rebuilt every step, as the live cache's are for jobs
counting declared steps, is read as it is).

Every quantity is computed with the operations, in the order, of the policy's per-job formulas
(``Singularity._facts``, ``stint.model.sla.attainment``), so each element is the same float, and
the drain time is summed sequentially in the view's order as the per-job loop summed it: the
orders and the drain time are the very ones the per-job code finds (``tests/policies/
test_singularity.py::test_the_table_finds_the_per_job_victim_order_and_drain_time`` compares
them on random jobs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stint.policies.base import JobStatus

_COLUMNS = ("rank", "target", "rate_req", "top", "ideal", "deadline", "work", "known", "arrival", "workers",
            "gpw")


def work_done_at(statuses: Sequence[JobStatus], work: np.ndarray, now: float) -> np.ndarray:
    """``st.work_done_at(now)`` of every status (``work``: their specs' work), as one array (the
    same floats, without a Python call per job: a congested pass reads thousands)."""
    done = np.array([st.work_done for st in statuses], dtype=float)
    as_of = np.array([math.nan if (t := st.as_of_s) is None else t for st in statuses], dtype=float)  # not lazy
    rate = np.array([st.rate for st in statuses], dtype=float)
    return np.where(np.isnan(as_of), done, np.minimum(work, done + rate * (now - as_of)))


def known_totals(known: np.ndarray, done: np.ndarray) -> np.ndarray:
    """``JobStatus.known_total_at`` of every row, as one array: the known work, doubled until it
    reaches the work done (``knowledge.known_total``; doubling is exact in floats). Only the
    rows past their known work are computed (most jobs of a pass are within it)."""
    over = np.flatnonzero(done > known)
    out = known.copy()
    if len(over):
        out[over] = _doubled(known[over], done[over])
    return out


def _doubled(known: np.ndarray, done: np.ndarray) -> np.ndarray:
    """``known_totals`` of rows whose work done exceeds their known work."""
    base = np.maximum(known, 1e-12)
    k = np.ceil(np.log2(done / base))
    total = base * np.exp2(np.maximum(k, 0.0))
    total = np.where(total < done, total * 2.0, total)  # log2's rounding near a power of two
    half = total / 2.0
    out: np.ndarray = np.where((half >= done) & (half >= base), half, total)
    return out


def known_left(known: np.ndarray, done: np.ndarray) -> np.ndarray:
    """``JobStatus.known_remaining_at`` of every row: ``known_totals`` less the work done."""
    out: np.ndarray = known_totals(known, done) - done
    return out


@dataclass(frozen=True, slots=True)
class Constants:
    """What the rules read of a job that stays the same while it is active (kept per job id)."""

    rank: int
    target: float | None
    rate_req: float  # work units/s at the requested size, packed on the fewest nodes
    rate_top: float  # at its largest size
    ideal_s: float  # its whole work at ``rate_req``
    deadline_s: float | None  # the latest finish meeting its target (None: it has none)
    smallest: int  # GPUs at its smallest size (rule 1)


@dataclass(frozen=True, slots=True)
class ServeOrder:
    """Waiting jobs in serve order (rule 2), with each one's slack and remaining ideal time and
    whether it is on time and critical (rule 8), position by position."""

    ids: list[str]
    slack: list[float]
    remaining: list[float]
    on_time: list[bool]
    critical: list[bool]


@dataclass(frozen=True, slots=True)
class VictimOrder:
    """Running jobs in victim order (rule 3), with each one's tier rank and whether it is
    critical (rule 8), position by position."""

    ids: list[str]
    ranks: np.ndarray  # ascending (the order's first key)
    critical: list[bool]
    slack: np.ndarray  # as ``Facts.slack_s`` (inf: no target)


class Table:
    """Per-job constants, one row per job id (rows are reused when jobs leave)."""

    def __init__(self) -> None:
        self.row: dict[str, int] = {}
        self._spare: list[int] = []
        self._cap = 0
        self.rank = np.zeros(0, dtype=np.int64)
        self.target = self.rate_req = self.top = self.ideal = self.deadline = np.zeros(0)
        self.work = self.known = self.arrival = self.workers = self.gpw = np.zeros(0)
        self.jid = np.zeros(0, dtype="U16")

    def add(self, job_id: str, c: Constants, work: float, known: float, arrival_s: float, workers: int,
            gpus_per_worker: int) -> None:
        """Add (or replace) the row of ``job_id``: its constants, work (where its progress
        stops), known work (``JobStatus.known_work``: all the rules read), arrival, requested
        workers and GPUs per worker."""
        i = self.row.get(job_id)
        if i is None:
            i = self._spare.pop() if self._spare else self._grow()
            self.row[job_id] = i
        if len(job_id) > self.jid.dtype.itemsize // 4:
            self.jid = self.jid.astype(f"U{max(len(job_id), 2 * (self.jid.dtype.itemsize // 4))}")
        self.rank[i], self.target[i], self.rate_req[i], self.top[i] = c.rank, c.target or 0.0, c.rate_req, c.rate_top
        self.ideal[i], self.deadline[i] = c.ideal_s, math.nan if c.deadline_s is None else c.deadline_s
        self.work[i], self.known[i], self.arrival[i], self.jid[i] = work, known, arrival_s, job_id
        self.workers[i], self.gpw[i] = workers, gpus_per_worker

    def drop(self, job_id: str) -> None:
        i = self.row.pop(job_id, None)
        if i is not None:
            self._spare.append(i)

    def _grow(self) -> int:
        i, cap = self._cap, max(64, 2 * self._cap)
        for name in _COLUMNS:
            col = getattr(self, name)
            new = np.zeros(cap, dtype=col.dtype)
            new[:i] = col[:i]
            setattr(self, name, new)
        jid = np.zeros(cap, dtype=self.jid.dtype)
        jid[:i] = self.jid[:i]
        self.jid, self._cap = jid, cap
        self._spare.extend(range(cap - 1, i, -1))
        return i

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        return np.fromiter(map(self.row.__getitem__, ids), dtype=np.intp, count=len(ids))

    def _quantities(self, r: np.ndarray, done: np.ndarray, now: float, restart_s: float, allowance_s: float,
                    drain: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rows ``r``'s work left, remaining ideal time, surplus, critical flag and deadline at
        ``now`` (``Singularity._facts``' formulas, operation by operation)."""
        rate, known = self.rate_req[r], self.known[r]
        total = known_totals(known, done)
        left = total - done
        over = (total != known) & (rate > 0)  # run past its estimate: the longer job's SLA
        with np.errstate(divide="ignore", invalid="ignore"):
            ideal = np.where(over, total / np.where(rate > 0, rate, 1.0), self.ideal[r])
            deadline = np.where(over & ~np.isnan(self.deadline[r]),
                                self.arrival[r] + allowance_s + ideal / np.where(over, self.target[r], 1.0),
                                self.deadline[r])
            remaining = np.where(rate > 0, left / np.where(rate > 0, rate, 1.0), math.inf)
            charged = np.maximum(now + restart_s + remaining - self.arrival[r], 0.0) - allowance_s
            proj = np.where(np.isinf(ideal), 0.0, np.where(charged <= ideal, 1.0, ideal / charged))
        critical = remaining > drain if drain is not None else np.zeros(len(r), dtype=bool)
        return left, remaining, proj - self.target[r], critical, deadline

    def victim_order(self, ids: Sequence[str], statuses: Sequence[JobStatus], now: float, restart_s: float,
                     allowance_s: float, drain: float | None) -> VictimOrder:
        """``ids`` (running jobs, ``statuses`` theirs) in rule 3's order: lowest
        tier, not critical before critical, largest surplus (shortest remaining among critical
        ones), latest arrival, job id; as ``Facts.victim_key`` sorts them."""
        if not ids:
            return VictimOrder([], np.zeros(0, dtype=np.int64), [], np.zeros(0))
        r = self.rows(ids)
        done = work_done_at(statuses, self.work[r], now)
        _, remaining, surplus, critical, deadline = self._quantities(r, done, now, restart_s, allowance_s, drain)
        rank = self.rank[r]
        order = np.lexsort((self.jid[r], -self.arrival[r], np.where(critical, remaining, -surplus), critical, rank))
        return VictimOrder(self.jid[r][order].tolist(), rank[order], critical[order].tolist(),
                           self._slack(deadline, remaining, now, restart_s)[order])

    @staticmethod
    def _slack(deadline: np.ndarray, remaining: np.ndarray, now: float, restart_s: float) -> np.ndarray:
        """The rows' slack (``Singularity._facts``: the latest finish meeting the target, less
        a restart, less the remaining ideal time; inf without a target)."""
        due = deadline - now - restart_s
        return np.where(np.isnan(due), math.inf, due - remaining)

    def serve_order(self, ids: Sequence[str], statuses: Sequence[JobStatus], now: float, restart_s: float,
                    allowance_s: float, drain: float | None) -> ServeOrder:
        """``ids`` (waiting jobs, ``statuses`` theirs) in rule 2's order: higher tier, on
        time first, less slack among those, critical first and the longest remaining (among
        the others), lowest projected attainment, earlier arrival, job id; as
        ``Facts.serve_key`` sorts them."""
        r = self.rows(ids)
        done = work_done_at(statuses, self.work[r], now)
        left, remaining, surplus, critical, deadline = self._quantities(r, done, now, restart_s, allowance_s, drain)
        due = deadline - now - restart_s
        timed = ~np.isnan(due)
        top = self.top[r]
        slack = self._slack(deadline, remaining, now, restart_s)
        with np.errstate(divide="ignore", invalid="ignore"):
            late = timed & ((top <= 0) | (due < left / np.where(top > 0, top, 1.0)))
        on_time = timed & ~late
        leads = critical & ~on_time
        value = np.where(on_time, slack, np.where(leads, -remaining, surplus))
        order = np.lexsort((self.jid[r], self.arrival[r], value, ~leads, ~on_time, -self.rank[r]))
        return ServeOrder(self.jid[r][order].tolist(), slack[order].tolist(), remaining[order].tolist(),
                          on_time[order].tolist(), critical[order].tolist())

    def drain_work(self, ids: Sequence[str], statuses: Sequence[JobStatus], now: float) -> float:
        """The remaining GPU-seconds at ``now`` at the requested size of ``ids`` (``statuses``:
        theirs), summed in ``ids``' order (jobs without a rate left out)."""
        if not ids:
            return 0.0
        r = self.rows(ids)
        rate, work = self.rate_req[r], self.work[r]
        left = known_left(self.known[r], work_done_at(statuses, work, now))
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(rate > 0, left / rate * self.workers[r] * self.gpw[r], 0.0)
        return float(np.cumsum(terms)[-1]) + 0.0
