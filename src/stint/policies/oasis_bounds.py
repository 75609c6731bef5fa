"""The price bounds U and L of OASiS, eqs. (23)-(26), estimated from observed jobs.

The paper computes U and L from all jobs and then says they are "estimated (based on past
experience)". :class:`BoundsEstimator` is that estimate: it observes jobs one at a time (history
first, then arrivals) and yields the bounds of everything seen so far. Decisions on the paper's
open points (docs/oasis.md):

- (3) units: demands and capacities are normalised by the host group's mean capacity, so the sums
  over r in (26) and in the η bound add dimensionless shares of a server.
- (4) f_i(T - a_i) is ~0 for time-critical jobs, which would send L to 0. The minimum in (26) is
  taken over jobs whose utility at the horizon is at least ``NEGLIGIBLE`` of the largest utility
  seen (L is floored at ``1e-12``·U). The factor 1/(4η) of (26) exists for the proof of Thm 4
  (initial dual <= OPT/2); with T = 300 and 50 hosts it is ~1e-6 and leaves prices negligible
  until hosts are ~85% booked. η is applied only with ``use_eta=True`` (paper-literal); by
  default L is a quarter of the lowest value density f_i(T - a_i) / (W_i Σ_r w_i^r). The 1/4
  is kept: at price L the least valuable job still pays only a quarter of its value, so it
  remains admissible on an empty cluster.
- (5) durations count slots inclusively: a job whose last slot is t̂ has run t̂ - a_i + 1 slots,
  so (23) evaluates f at ``ceil(E_i M_i (τ_i + 2e_i/b_i))`` slots and (26) at T - a_i slots.
- U^r is the max over jobs with a positive demand of r (a zero demand would make it infinite).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from stint.policies.oasis_core import DPJob, FloatArray

NEGLIGIBLE = 1e-3


@dataclass(frozen=True, slots=True)
class PriceBounds:
    """L and U^r for worker hosts (L1, U1) and PS hosts (L2, U2), in normalised units."""

    low_w: float
    high_w: FloatArray
    low_p: float
    high_p: FloatArray

    def scaled(self, factor: float) -> PriceBounds:
        """Misestimated bounds, as in Fig. 6: both U and L at ``factor`` of their actual values."""
        if factor <= 0:
            raise ValueError(f"bound scale must be positive (got {factor})")
        return replace(self, low_w=self.low_w * factor, high_w=self.high_w * factor,
                       low_p=self.low_p * factor, high_p=self.high_p * factor)

    @property
    def alpha(self) -> float:
        """Thm 4's α = max_r(1, ln(U1^r/L1), ln(U2^r/L2)); OASiS is 2α-competitive."""
        logs = [1.0, *np.log(self.high_w / self.low_w), *np.log(self.high_p / self.low_p)]
        return float(max(logs))


class _Side:
    """Running (23)/(25)/(26) terms for one host group."""

    def __init__(self, horizon: int, total_cap_share: float, nres: int) -> None:
        self.scale = horizon * total_cap_share  # T Σ_h Σ_r c_h^r (normalised)
        self.high = np.zeros(nres)
        self.eta = 1.0
        self.samples: list[tuple[float, float]] = []  # (f_i(T - a_i), W_i Σ_r w_i^r)
        self.f_max = 0.0
        self.low_kept = math.inf  # min f/size over samples with f >= NEGLIGIBLE · f_max

    def observe(self, f_best: float, f_end: float, work: float, demand: FloatArray) -> None:
        pos = demand > 0
        self.high[pos] = np.maximum(self.high[pos], f_best / demand[pos])
        size = work * float(demand.sum())
        if size <= 0:
            return
        self.eta = max(self.eta, self.scale / size)
        self.samples.append((f_end, size))
        if f_best > self.f_max:  # the cut-off rose: re-scan (rare)
            self.f_max = f_best
            self.low_kept = min((f / w for f, w in self.samples if f >= NEGLIGIBLE * f_best),
                                default=math.inf)
        elif f_end >= NEGLIGIBLE * self.f_max:
            self.low_kept = min(self.low_kept, f_end / size)

    def bounds(self, use_eta: bool) -> tuple[float, FloatArray]:
        high = np.where(self.high > 0, self.high, self.high.max(initial=1.0))
        kept = self.low_kept if math.isfinite(self.low_kept) else 0.0
        base = kept / (4.0 * (self.eta if use_eta else 1.0))
        low = max(base, 1e-12 * float(high.min()))
        return low, np.maximum(high, low)


class BoundsEstimator:
    """Observe jobs (as :class:`DPJob` over a horizon of ``horizon`` slots), read the bounds."""

    def __init__(self, horizon: int, worker_cap_share: float, ps_cap_share: float,
                 nres: int, use_eta: bool = False) -> None:
        self.horizon = horizon
        self.use_eta = use_eta
        self._w = _Side(horizon, worker_cap_share, nres)
        self._p = _Side(horizon, ps_cap_share, nres)
        self.seen = 0

    def observe(self, job: DPJob) -> None:
        work = math.ceil(job.quanta * job.quantum_ws - 1e-9)  # ⌈E N M (τ + 2e/b)⌉ worker-slots
        shortest = max(1, math.ceil(work / job.max_workers))  # ⌈E M (τ + 2e/b)⌉ slots
        f_best = float(job.utility[min(shortest, len(job.utility)) - 1])
        f_end = float(job.utility[-1])
        self._w.observe(f_best, f_end, work, job.worker_demand)
        if job.ps_demand is not None:
            self._p.observe(f_best, f_end, work, job.ps_demand)
        self.seen += 1

    def bounds(self) -> PriceBounds:
        lw, hw = self._w.bounds(self.use_eta)
        lp, hp = self._p.bounds(self.use_eta)
        return PriceBounds(lw, hw, lp, hp)
