"""SLA attainment per tier (Singularity's premium, standard and basic tiers).

A job's *attainment* is the share of its requested throughput it received over its life: its
ideal run time at the requested size divided by the time it has been in the system,

    attainment = ideal_s / (elapsed_s - allowance_s),  capped at 1,

where ``elapsed_s`` is finish (or now) minus arrival and ``allowance_s`` is a start-up allowance
(``STARTUP_ALLOWANCE_S``, 60 s: one launch or restart of 30 s and a scheduling pass) that no job is
charged for. A job that finished within ``ideal_s + allowance_s`` of its arrival attained 1. For a
job still running, ``ideal_s`` is the ideal time of the work it has done so far (attainment *so
far*). A tier's target is the attainment a job of that tier must reach (defaults after
Singularity: premium 0.95, standard 0.70, basic best effort, i.e. no target).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stint.model.job import Tier

STARTUP_ALLOWANCE_S = 60.0


def attainment(ideal_s: float, elapsed_s: float, allowance_s: float = STARTUP_ALLOWANCE_S) -> float:
    """``ideal_s / (elapsed_s - allowance_s)`` in [0, 1]; 1 within the allowance (see module)."""
    if ideal_s < 0 or elapsed_s < 0 or allowance_s < 0:
        raise ValueError(f"attainment: times must be >= 0 (ideal {ideal_s}, elapsed {elapsed_s}, "
                         f"allowance {allowance_s})")
    if math.isinf(ideal_s):
        return 0.0
    charged = elapsed_s - allowance_s
    if charged <= ideal_s:
        return 1.0
    return ideal_s / charged


@dataclass(frozen=True, slots=True)
class SlaTargets:
    """Attainment each tier must reach; None is best effort (no target)."""

    premium: float | None = 0.95
    standard: float | None = 0.70
    basic: float | None = None

    def __post_init__(self) -> None:
        for tier in Tier:
            t = self.of(tier)
            if t is not None and not 0.0 < t <= 1.0:
                raise ValueError(f"SLA target for {tier} must be in (0, 1] or None (got {t})")

    def of(self, tier: Tier) -> float | None:
        if tier is Tier.PREMIUM:
            return self.premium
        if tier is Tier.STANDARD:
            return self.standard
        return self.basic

    def met(self, tier: Tier, value: float) -> bool:
        """True if ``value`` meets ``tier``'s target (always, for best effort)."""
        target = self.of(tier)
        return target is None or value >= target - 1e-9


def deadline_s(arrival_s: float, ideal_s: float, target: float,
               allowance_s: float = STARTUP_ALLOWANCE_S) -> float:
    """The latest finish that still meets ``target``: arrival + allowance + ideal / target."""
    return arrival_s + allowance_s + ideal_s / target
