"""Alg. 2 with the mechanism's costs: a schedule that pays for every start, stop and resize.

The paper's DP (``oasis_core.best_schedule``) lets a job's worker count change every slot for
free. A live job pays for each change: it checkpoints, stops and restarts, and makes no progress
for ``restart_s`` seconds. This DP plans with that cost, so no plan's restarts eat its slots:

- the state is (work units done, the worker count of the previous slot); a slot that keeps the
  previous count does a full slot of work, a slot that changes it (a resize, a resume after a
  pause) loses ``restart_s`` of it, the first start loses ``start_s``;
- if ``restart_s`` is a whole slot or more, a started job keeps its count (and its hosts) until it
  is done: a change would cost at least a slot's work, more than it could gain in that slot;
- the first slot may be partly over (an arrival planned into the current slot): it gives
  ``first_frac`` of a slot;
- worker counts are those the job can run on (``DPJob.counts``), and a slot that keeps the
  count keeps the hosts where they still fit (a move would be a restart too).

The payoff is the paper's: f at the completion slot minus Σ prices · demands. Exact over this
state space (no pruning but the utility bound: f is non-increasing and costs are >= 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stint.policies.oasis_core import (
    DPJob,
    FloatArray,
    HostPrices,
    IntArray,
    Schedule,
    greedy_fill,
    slot_costs,
)

_EPS = 1e-9
NEAR = 0.01  # payoffs within this share of the job's utility are equally good (see _best_interval)


@dataclass(frozen=True, slots=True)
class RestartCosts:
    """What a change costs, as fractions of a slot, and where the job stands now."""

    restart: float  # restart_s / slot_s (a resize, or a resume after a pause)
    start: float  # start_s / slot_s (the first start)
    first_frac: float = 1.0  # the part of the first slot still ahead
    workers_now: int = 0  # the job's current worker count (0: not running)
    hosts_now: IntArray | None = None  # its current workers per worker host, if running

    @property
    def frozen(self) -> bool:
        """A started job never changes its count (a change costs a whole slot or more)."""
        return self.restart >= 1.0 - _EPS


def _units(y: IntArray, frac: float, loss: float, q: float) -> IntArray:
    """Work units ``y`` workers do in a slot of which ``frac`` is ahead, losing ``loss`` of it."""
    eff = max(0.0, frac - loss)
    out: IntArray = np.floor(y * eff / q + _EPS).astype(np.int64)
    return out


def best_schedule_with_costs(job: DPJob, wh: HostPrices, ph: HostPrices | None, end_slot: int,
                             rc: RestartCosts) -> Schedule | None:
    """The highest-payoff schedule (any sign; the caller admits only μ > 0), or None if none
    completes the job by ``end_slot`` (exclusive)."""
    n = min(end_slot - job.arrival_slot, len(job.utility))
    if n <= 0 or not job.counts:
        return None
    if rc.frozen:
        return _best_interval(job, wh, ph, n, rc)
    return _best_dp(job, wh, ph, n, rc)


def _best_dp(job: DPJob, wh: HostPrices, ph: HostPrices | None, n: int, rc: RestartCosts
             ) -> Schedule | None:
    """The DP over (units done, previous count) for a restart shorter than a slot.

    Per slot and count, three kinds of predecessor: the same count (a full slot), any other
    started state (a resize or resume: ``restart`` lost; the best two of them per units-done
    cover all), and not yet started (``start`` lost). It stops when no later completion can
    beat the best by more than ``NEAR`` (the remaining units at price L bound its cost)."""
    a, D = job.arrival_slot, job.quanta
    counts = np.array([0, *job.counts], dtype=np.int64)  # index 0: no workers this slot
    ymax, C = int(counts[-1]), len(counts)
    K = C + 1  # state k < C: the previous slot ran counts[k]; K - 1: not started yet
    value = np.full((K, D + 1), np.inf)
    first = K - 1
    if rc.workers_now > 0 and rc.workers_now in job.counts:
        first = int(np.searchsorted(counts, rc.workers_now))
    value[first, 0] = 0.0
    floor = _unit_floor(job, wh, ph) * (D - np.arange(D))  # remaining units at price L
    tol = NEAR * float(job.utility.max(initial=0.0))
    cols = np.arange(D)
    back: list[tuple[IntArray, IntArray]] = []
    best_mu = -np.inf
    best: tuple[int, tuple[int, int, int]] | None = None
    for j in range(n):
        frac = rc.first_frac if j == 0 else 1.0
        cost = frac * slot_costs(job, wh, ph, a + j, a + j + 1, ymax)[0][counts]
        started = value[:C, :D]
        a1 = started.argmin(axis=0)
        m1 = started[a1, cols]
        rest = started.copy()
        rest[a1, cols] = np.inf
        a2 = rest.argmin(axis=0)
        m2 = rest[a2, cols]
        new = np.full((K, D + 1), np.inf)
        prev_k = np.full((K, D + 1), -1, dtype=np.int64)
        prev_d = np.full((K, D + 1), -1, dtype=np.int64)
        done_cost, done_from = np.inf, (-1, -1, -1)
        _relax(new, prev_k, prev_d, K - 1, value[K - 1, :D], 0, np.full(D, K - 1))  # waiting
        for yi in range(C):
            moves = [(started[yi], 0.0, np.full(D, yi)),
                     (value[K - 1, :D], rc.start, np.full(D, K - 1))]
            if not rc.frozen:
                other = a1 == yi
                moves.append((np.where(other, m2, m1), rc.restart, np.where(other, a2, a1)))
            for row, loss, origin in moves:
                if yi == 0 and origin[0] == K - 1:
                    continue  # idle before the start is the waiting state (relaxed above)
                u = int(_units(counts[yi:yi + 1], frac, loss, job.quantum_ws)[0])
                c = row + cost[yi]
                if u > 0:
                    lo = max(0, D - u)
                    i = lo + int(np.argmin(c[lo:]))
                    if c[i] < done_cost:
                        done_cost, done_from = float(c[i]), (int(origin[i]), i, yi)
                if D - u > 0:
                    _relax(new, prev_k, prev_d, yi, c[:D - u], u, origin[:D - u])
        back.append((prev_k, prev_d))
        if np.isfinite(done_cost) and float(job.utility[j]) - done_cost > best_mu:
            best_mu, best = float(job.utility[j]) - done_cost, (j, done_from)
        value = new
        if j + 1 >= n:
            break
        bound = float((value[:, :D] + floor).min(initial=np.inf))
        if float(job.utility[j + 1]) - bound <= best_mu + (tol if best is not None else 0.0):
            break  # f is non-increasing: no later completion beats the best by more than NEAR
    if best is None:
        return None
    j_last, (k, d, yi) = best
    ys = [int(counts[yi])]
    for jj in range(j_last - 1, -1, -1):  # state (k, d) after slot jj: slot jj ran counts[k]
        ys.append(int(counts[k]) if k < C else 0)
        pk, pd = back[jj]
        k, d = int(pk[k, d]), int(pd[k, d])
    ys.reverse()
    return _place(job, wh, ph, ys, rc)


def _unit_floor(job: DPJob, wh: HostPrices, ph: HostPrices | None) -> float:
    """What one work unit costs at least: its worker-slots (and PS share) at price L."""
    out = job.quantum_ws * wh.low * float(job.worker_demand.sum())
    if ph is not None and job.ps_demand is not None and job.ps_ratio is not None:
        out += job.quantum_ws * job.ps_ratio * ph.low * float(job.ps_demand.sum())
    return out


def _best_interval(job: DPJob, wh: HostPrices, ph: HostPrices | None, n: int, rc: RestartCosts
                   ) -> Schedule | None:
    """A restart of a slot or more: one count on the same hosts for consecutive slots, from a
    start slot to completion. Every (count, start slot) is priced exactly."""
    a = job.arrival_slot
    unit = wh.unit_price(a, a + n, job.worker_demand)  # (n, H)
    room = np.minimum(wh.room(a, a + n, job.worker_demand), job.max_workers)
    punit = proom = None
    if ph is not None and job.ps_demand is not None and job.ps_ratio is not None:
        punit, proom = ph.unit_price(a, a + n, job.ps_demand), ph.room(a, a + n, job.ps_demand)
    cands: list[tuple[float, int, int, IntArray, IntArray]] = []  # (μ, start, slots, w, p)
    for y in job.counts:
        full = int(_units(np.array([y]), 1.0, 0.0, job.quantum_ws)[0])
        if full <= 0:
            continue
        for s in range(n):
            keep = s == 0 and rc.workers_now == y and rc.hosts_now is not None
            loss = 0.0 if keep else rc.restart if rc.workers_now else rc.start
            first = int(_units(np.array([y]), rc.first_frac if s == 0 else 1.0, loss,
                               job.quantum_ws)[0])
            slots = 1 if first >= job.quanta else 1 + -(-(job.quanta - first) // full)
            if s + slots > n:
                if s:
                    break
                continue
            w = _fixed(unit[s:s + slots], room[s:s + slots], y, rc.hosts_now if keep else None)
            z = int(job.ps_for(np.array([y]))[0])
            p: IntArray | None = np.zeros(0 if punit is None else punit.shape[1], dtype=np.int64)
            if z:
                assert punit is not None and proom is not None
                p = _fixed(punit[s:s + slots], proom[s:s + slots], z, None)
            if w is None or p is None:
                continue
            cost = _window_cost(w, unit, p, punit, s, slots, rc.first_frac)
            cands.append((float(job.utility[s + slots - 1]) - cost, s, slots, w, p))
    if not cands:
        return None
    # Among schedules within NEAR of the best payoff, the earliest completion, then the
    # earliest start: slot rounding makes near-equal payoffs of very different lengths, and a
    # job whose length is an estimate gains slack by finishing early.
    top = max(c[0] for c in cands)
    tol = NEAR * max(abs(top), float(job.utility.max(initial=0.0)))
    _, s, slots, w, p = min((c for c in cands if c[0] >= top - tol),
                            key=lambda c: (c[1] + c[2], c[1], -c[0]))
    ys = [0] * s + [int(w.sum())] * slots
    workers = np.zeros((len(ys), unit.shape[1]), dtype=np.int64)
    ps = np.zeros((len(ys), p.shape[0]), dtype=np.int64)
    workers[s:] = w
    if p.shape[0]:
        ps[s:] = p
    cost = _window_cost(w, unit, p, punit, s, slots, rc.first_frac)
    return Schedule(a, a + len(ys) - 1, workers, ps, float(job.utility[len(ys) - 1]), cost)


def _window_cost(w: IntArray, unit: FloatArray, p: IntArray, punit: FloatArray | None, s: int,
                 slots: int, first_frac: float) -> float:
    """Σ prices · demands over the window (the current slot's price for the part still ahead)."""
    scale = np.ones(slots)
    if s == 0:
        scale[0] = first_frac
    cost = float(w @ (scale @ unit[s:s + slots]))
    if punit is not None and p.shape[0]:
        cost += float(p @ (scale @ punit[s:s + slots]))
    return cost


def _fixed(unit: FloatArray, room: IntArray, count: int, hosts: IntArray | None
           ) -> IntArray | None:
    """``count`` tasks on the same hosts in every slot of the window: ``hosts`` if given and they
    fit, else cheapest-first on the window's summed prices (None if they do not fit)."""
    low = room.min(axis=0)
    if hosts is not None:
        return hosts if bool(np.all(hosts <= low)) else None
    if int(low.sum()) < count:
        return None
    return greedy_fill(unit.sum(axis=0), low, count)


def _relax(new: FloatArray, prev_k: IntArray, prev_d: IntArray, nk: int, c: FloatArray,
           shift: int, origin: IntArray) -> None:
    """new[nk, d + shift] = min(new[nk, d + shift], c[d]), remembering the predecessor state
    ``origin[d]`` and units ``d``."""
    m = len(c)
    tgt = new[nk, shift:shift + m]
    better = c < tgt
    if not better.any():
        return
    idx = np.flatnonzero(better)
    tgt[idx] = c[idx]
    prev_k[nk, shift + idx] = origin[idx]
    prev_d[nk, shift + idx] = idx


def _place(job: DPJob, wh: HostPrices, ph: HostPrices | None, ys: list[int],
           rc: RestartCosts) -> Schedule:
    """Hosts for each slot's workers and PSs: the previous slot's where the count is kept and
    they still fit (else, and at a change, cheapest hosts first, as Thm 1's greedy)."""
    a = job.arrival_slot
    workers = np.zeros((len(ys), wh.cap.shape[0]), dtype=np.int64)
    ps = np.zeros((len(ys), ph.cap.shape[0] if ph is not None else 0), dtype=np.int64)
    cost = 0.0
    prev_w = rc.hosts_now if rc.hosts_now is not None else np.zeros(wh.cap.shape[0], np.int64)
    prev_p = np.zeros(ps.shape[1], dtype=np.int64)
    for j, y in enumerate(ys):
        t = a + j
        if y == 0:
            prev_w, prev_p = workers[j], ps[j]
            continue
        unit = wh.unit_price(t, t + 1, job.worker_demand)[0]
        room = np.minimum(wh.room(t, t + 1, job.worker_demand)[0], job.max_workers)
        keep = int(prev_w.sum()) == y and bool(np.all(prev_w <= room))
        workers[j] = prev_w if keep else greedy_fill(unit, room, y)
        share = rc.first_frac if j == 0 else 1.0  # the current slot: the part still ahead
        cost += share * float(workers[j] @ unit)
        z = int(job.ps_for(np.array([y]))[0])
        if z:
            assert ph is not None and job.ps_demand is not None
            punit = ph.unit_price(t, t + 1, job.ps_demand)[0]
            proom = ph.room(t, t + 1, job.ps_demand)[0]
            pkeep = int(prev_p.sum()) == z and bool(np.all(prev_p <= proom))
            ps[j] = prev_p if pkeep else greedy_fill(punit, proom, z)
            cost += share * float(ps[j] @ punit)
        prev_w, prev_p = workers[j], ps[j]
    return Schedule(a, a + len(ys) - 1, workers, ps, float(job.utility[len(ys) - 1]), cost)
