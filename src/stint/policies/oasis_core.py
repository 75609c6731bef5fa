"""Numerical core of OASiS (Bao et al., INFOCOM'18): prices (eq. 22), the greedy per-slot cost
COST_t (Thm 1), the dynamic programme of Alg. 2 and the commit step of Alg. 1. Pure NumPy.

Resources are in *normalised units*: every amount is divided by the mean capacity of that resource
over the host group (open point 3 in docs/oasis.md), so a price is per share of an average server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_EPS = 1e-9
_FIRST_BLOCK = 16  # slots of COST_t computed at once; doubles, so most jobs stop early


@dataclass(frozen=True, slots=True)
class DPJob:
    """What Alg. 2 needs to know about job i, in slots and normalised resources.

    The workload is ``quanta`` units of ``quantum_ws`` worker-slots each. With ``quanta = E_i N_i``
    a unit is the paper's chunk (``M_i (τ_i + 2e_i/b_i)`` worker-slots); larger jobs use coarser
    units (open point 10). ``utility[j]`` is f_i when the job's last slot is ``arrival_slot + j``.
    """

    arrival_slot: int
    max_workers: int
    quanta: int
    quantum_ws: float
    ps_ratio: float | None
    worker_demand: FloatArray
    ps_demand: FloatArray | None
    utility: FloatArray
    # The worker counts the job can run on, ascending (``JobSpec.feasible_counts``); read by
    # the DP that prices restarts (``oasis_restart``), which plans only these counts.
    counts: tuple[int, ...] = ()
    # The PS counts the job may run with when it has workers (``JobSpec.min_ps``/``max_ps``;
    # 0: no bound beyond constraints (6)-(7)).
    min_ps: int = 0
    max_ps: int = 0

    def workers_for(self, d: IntArray) -> IntArray:
        """Workers needed to process ``d`` units in one slot: ``ceil(d · M_i(τ_i + 2e_i/b_i))``."""
        out: IntArray = np.ceil(d * self.quantum_ws - _EPS).astype(np.int64)
        return out

    def ps_for(self, y: IntArray) -> IntArray:
        """PSs placed for ``y`` workers: ``min(ceil(y b_i/B_i), y)``, constraints (6) and (7),
        then within ``min_ps``..``max_ps`` where the job bounds them (none for 0 workers)."""
        if self.ps_ratio is None:
            return np.zeros_like(y)
        out: IntArray = np.minimum(np.ceil(y * self.ps_ratio - _EPS).astype(np.int64), y)
        if self.min_ps or self.max_ps:
            out = np.where(y > 0, np.clip(out, self.min_ps, self.max_ps or None), 0)
        return out


class HostPrices:
    """One host group (worker hosts, or PS hosts): capacities, committed load, prices (eq. 22).

    ``price[t, s, r] = L · (U^r / L) ** (load[t, s, r] / cap[s, r])``: L at zero load, U^r at
    capacity. Prices are cached and refreshed only for slots whose load changed (open point 10).
    """

    def __init__(self, cap: FloatArray, low: float, high: FloatArray, slots: int) -> None:
        self.cap = np.asarray(cap, dtype=np.float64)
        self.load = np.zeros((slots,) + self.cap.shape)
        self.price = np.empty_like(self.load)
        self.set_bounds(low, high)

    def set_bounds(self, low: float, high: FloatArray) -> None:
        """Change L and U (their estimates may improve online); recomputes every price."""
        high = np.broadcast_to(np.asarray(high, dtype=np.float64), self.cap.shape[1:])
        if low <= 0 or np.any(high < low):
            raise ValueError(f"price bounds need 0 < L <= U (got L={low}, U={high})")
        self.low = float(low)
        self.high = high.copy()
        self._log_ratio = np.log(self.high / self.low)
        self._refresh(slice(None))

    @property
    def slots(self) -> int:
        return self.load.shape[0]

    def ensure_slots(self, slots: int) -> None:
        """Grow the horizon to at least ``slots`` slots (new slots are empty)."""
        if slots <= self.slots:
            return
        extra = max(slots, 2 * self.slots) - self.slots
        self.load = np.concatenate([self.load, np.zeros((extra,) + self.cap.shape)])
        self.price = np.concatenate([self.price, np.empty((extra,) + self.cap.shape)])
        self._refresh(slice(self.slots - extra, None))

    def _refresh(self, ts: slice | int) -> None:
        share = np.divide(self.load[ts], self.cap, out=np.zeros_like(self.load[ts]),
                          where=self.cap > 0)
        self.price[ts] = self.low * np.exp(self._log_ratio * share)

    def room(self, t0: int, t1: int, demand: FloatArray) -> IntArray:
        """How many tasks of ``demand`` still fit on each host in slots [t0, t1): shape (n, S)."""
        free = self.cap[None] - self.load[t0:t1]
        need = demand > 0
        if not need.any():
            return np.full((t1 - t0, self.cap.shape[0]), 1 << 30, dtype=np.int64)
        fits = np.floor((free[..., need] + _EPS) / demand[need])
        out: IntArray = np.maximum(fits.min(axis=-1), 0).astype(np.int64)
        return out

    def unit_price(self, t0: int, t1: int, demand: FloatArray) -> FloatArray:
        """Σ_r price · demand for one task on each host in slots [t0, t1): shape (n, S)."""
        out: FloatArray = self.price[t0:t1] @ demand
        return out

    def add(self, t: int, counts: IntArray, demand: FloatArray) -> None:
        """Commit (or, with negative counts, release) tasks in slot t; refresh that slot's prices."""
        self.load[t] += counts[:, None] * demand[None, :]
        self._refresh(t)


def fill_costs(unit: FloatArray, room: IntArray, ymax: int) -> FloatArray:
    """COST_t for 0..ymax tasks in every slot at once: fill the cheapest hosts first (Thm 1).

    ``unit`` and ``room`` have shape (n, S). Returns (n, ymax + 1); +inf where the tasks don't fit.
    """
    n, s = unit.shape
    if n == 0 or s == 0:  # no slot, or no host of the kind: only zero tasks fit
        empty: FloatArray = np.full((n, ymax + 1), np.inf)
        empty[:, 0] = 0.0
        return empty
    order = np.argsort(unit, axis=1, kind="stable")  # ties: lower host index first
    p = np.take_along_axis(unit, order, axis=1)
    c = np.minimum(np.take_along_axis(room, order, axis=1), ymax)
    cum_n = np.concatenate([np.zeros((n, 1), np.int64), np.cumsum(c, axis=1)], axis=1)
    cum_c = np.concatenate([np.zeros((n, 1)), np.cumsum(c * p, axis=1)], axis=1)
    p_pad = np.concatenate([p, np.full((n, 1), np.inf)], axis=1)
    y = np.arange(ymax + 1)
    # k[t, y] = hosts completely used before the y-th task: searchsorted on row-offset cumsums.
    stride = int(cum_n[:, -1].max()) + ymax + 2
    offsets = (np.arange(n) * stride)[:, None]
    flat = (cum_n[:, 1:] + offsets).ravel()
    k = np.searchsorted(flat, (y[None, :] + offsets).ravel(), side="left").reshape(n, -1)
    k -= np.arange(n)[:, None] * s
    rows = np.arange(n)[:, None]
    with np.errstate(invalid="ignore"):
        cost = cum_c[rows, k] + (y[None, :] - cum_n[rows, k]) * p_pad[rows, k]
    cost[:, 0] = 0.0
    out: FloatArray = cost
    return out


def greedy_fill(unit: FloatArray, room: IntArray, count: int) -> IntArray:
    """The placement behind ``fill_costs`` for one slot: per-host task counts, cheapest first."""
    out = np.zeros(unit.shape[0], dtype=np.int64)
    left = count
    for h in np.argsort(unit, kind="stable"):
        if left <= 0:
            break
        take = min(int(room[h]), left)
        out[h] = take
        left -= take
    if left > 0:
        raise ValueError(f"{count} tasks do not fit (short by {left})")
    return out


@dataclass(frozen=True, slots=True)
class Schedule:
    """A job's chosen schedule l*: per-slot host counts from ``start_slot`` to ``last_slot``."""

    start_slot: int
    last_slot: int
    workers: IntArray  # (slots, H)
    ps: IntArray  # (slots, K)
    utility: float
    cost: float

    @property
    def payoff(self) -> float:
        """μ_i = f_i(t̂_i) − Σ prices · demands (the dual constraint of (19))."""
        return self.utility - self.cost


def slot_costs(job: DPJob, wh: HostPrices, ph: HostPrices | None, t0: int, t1: int,
               ymax: int) -> FloatArray:
    """COST_t(t, y) for t in [t0, t1) and y = 0..ymax workers (plus their PSs)."""
    cw = fill_costs(wh.unit_price(t0, t1, job.worker_demand),
                    np.minimum(wh.room(t0, t1, job.worker_demand), job.max_workers), ymax)
    if job.ps_ratio is None:
        return cw
    assert ph is not None and job.ps_demand is not None
    z = job.ps_for(np.arange(ymax + 1))
    cp = fill_costs(ph.unit_price(t0, t1, job.ps_demand), ph.room(t0, t1, job.ps_demand),
                    int(z.max()))
    return cw + cp[:, z]


def best_schedule(job: DPJob, wh: HostPrices, ph: HostPrices | None, end_slot: int
                  ) -> Schedule | None:
    """Alg. 2: the schedule with the highest positive payoff ending by ``end_slot`` (exclusive).

    For each last slot t̂ = a_i, a_i+1, ... the DP cost(t, D) = min_d COST_t(t, d) + cost(t−1, D−d)
    is extended by one slot (memoised across t̂). Only μ > best (starting at 0) is kept, so ties go
    to the earlier t̂ and a job whose best payoff is not positive gets None. The loop stops once
    no later t̂ can beat the best (exact pruning, below), so COST_t is computed lazily, in
    blocks of slots of doubling size.
    """
    a, D = job.arrival_slot, job.quanta
    n = min(end_slot - a, len(job.utility))
    dmax = min(D, math.floor(job.max_workers / job.quantum_ws + _EPS))
    if n <= 0 or dmax <= 0:
        return None
    y_of_d = job.workers_for(np.arange(dmax + 1))
    unit_floor = job.quantum_ws * wh.low * float(job.worker_demand.sum())  # per unit, at price L
    if ph is not None and job.ps_demand is not None and job.ps_ratio is not None:
        unit_floor += job.quantum_ws * job.ps_ratio * ph.low * float(job.ps_demand.sum())
    ramp = np.arange(D + 1) * unit_floor
    back = np.arange(D + 1)[:, None] - np.arange(dmax + 1)[None, :]  # remaining units before t
    back[back < 0] = D + 1  # points at +inf
    best_mu, best_j = 0.0, -1
    prev = np.full(D + 2, np.inf)  # cost(t - 1, ·), with a trailing +inf for ``back``
    rows: list[FloatArray] = []  # cost(t, ·) per slot, for the backtrack
    costs: list[FloatArray] = []  # COST_t(t, ·) per slot
    ctd, block0, block = np.empty((0, dmax + 1)), 0, _FIRST_BLOCK
    for j in range(n):
        if j - block0 >= ctd.shape[0]:  # COST_t for the next block of slots (doubling)
            block0, stop = j, min(n, j + block)
            ctd = slot_costs(job, wh, ph, a + j, a + stop, int(y_of_d[-1]))[:, y_of_d]
            block *= 2
        cost_t = ctd[j - block0]
        if j == 0:
            row = np.full(D + 1, np.inf)
            row[: dmax + 1] = cost_t
        else:
            row = (prev[back] + cost_t).min(axis=1)
        rows.append(row)
        costs.append(cost_t)
        prev = np.append(row, np.inf)
        mu = job.utility[j] - row[D]
        if mu > best_mu:
            best_mu, best_j = float(mu), int(j)
        # Exact pruning: a later t̂ moves k units to slots priced at least L, so its cost is at
        # least min_k cost(t, D - k) + k · floor; with f non-increasing it cannot beat the best.
        if j + 1 < n and job.utility[j + 1] - float((row[::-1] + ramp).min()) <= best_mu:
            break
    if best_j < 0:
        return None
    return _materialise(job, wh, ph, _backtrack(rows, costs, best_j, D), y_of_d)


def _backtrack(rows: list[FloatArray], costs: list[FloatArray], last: int, total: int
               ) -> IntArray:
    """Units per slot along the DP's optimal path (ties: fewest units in the later slot)."""
    units = np.zeros(last + 1, dtype=np.int64)
    rem = total
    for j in range(last, 0, -1):
        d = np.arange(min(rem, len(costs[j]) - 1) + 1)
        units[j] = int(np.argmin(costs[j][d] + rows[j - 1][rem - d]))
        rem -= int(units[j])
    units[0] = rem
    return units


def _materialise(job: DPJob, wh: HostPrices, ph: HostPrices | None, units: IntArray,
                 y_of_d: IntArray) -> Schedule:
    """Place each slot's workers and PSs greedily, cheapest hosts first (Thm 1)."""
    a, last = job.arrival_slot, len(units) - 1
    workers = np.zeros((last + 1, wh.cap.shape[0]), dtype=np.int64)
    ps = np.zeros((last + 1, ph.cap.shape[0] if ph is not None else 0), dtype=np.int64)
    cost = 0.0
    for jj in np.flatnonzero(units):
        j = int(jj)
        t = a + j
        y = int(y_of_d[units[j]])
        unit = wh.unit_price(t, t + 1, job.worker_demand)[0]
        room = np.minimum(wh.room(t, t + 1, job.worker_demand)[0], job.max_workers)
        workers[j] = greedy_fill(unit, room, y)
        cost += float(workers[j] @ unit)
        z = int(job.ps_for(np.array([y]))[0])
        if z:
            assert ph is not None and job.ps_demand is not None
            punit = ph.unit_price(t, t + 1, job.ps_demand)[0]
            ps[j] = greedy_fill(punit, ph.room(t, t + 1, job.ps_demand)[0], z)
            cost += float(ps[j] @ punit)
    return Schedule(a, a + last, workers, ps, float(job.utility[last]), cost)


def commit(job: DPJob, sched: Schedule, wh: HostPrices, ph: HostPrices | None,
           sign: int = 1) -> None:
    """Alg. 1 steps 3-4: add the schedule's load (sign=-1 releases it) and update touched prices."""
    for j in range(sched.workers.shape[0]):
        t = sched.start_slot + j
        if sched.workers[j].any():
            wh.add(t, sign * sched.workers[j], job.worker_demand)
        if ph is not None and job.ps_demand is not None and sched.ps[j].any():
            ph.add(t, sign * sched.ps[j], job.ps_demand)


def schedule_cost(job: DPJob, sched: Schedule, wh: HostPrices, ph: HostPrices | None) -> float:
    """What the schedule costs at the current prices (eq. 19's dual terms)."""
    total = 0.0
    for j in range(sched.workers.shape[0]):
        t = sched.start_slot + j
        if sched.workers[j].any():
            total += float(sched.workers[j] @ wh.unit_price(t, t + 1, job.worker_demand)[0])
        if ph is not None and job.ps_demand is not None and sched.ps[j].any():
            total += float(sched.ps[j] @ ph.unit_price(t, t + 1, job.ps_demand)[0])
    return total
