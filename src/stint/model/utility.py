"""Utility of a job as a function of its completion time (seconds since arrival).

Every utility is non-negative and non-increasing, as OASiS requires (paper §1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class Utility(Protocol):
    def __call__(self, jct_s: float) -> float:
        """Utility earned if the job completes ``jct_s`` seconds after it arrived."""
        ...


@dataclass(frozen=True, slots=True)
class ConstantUtility:
    """Time-insensitive: the same value whenever the job completes."""

    value: float = 1.0

    def __call__(self, jct_s: float) -> float:
        return self.value


@dataclass(frozen=True, slots=True)
class SigmoidUtility:
    """OASiS eq. in §3: f(t) = γ1 / (1 + exp(γ2 (t − γ3))), with t and γ3 in slots of ``slot_s``."""

    gamma1: float
    gamma2: float
    gamma3: float
    slot_s: float = 3600.0

    def __call__(self, jct_s: float) -> float:
        x = self.gamma2 * (jct_s / self.slot_s - self.gamma3)
        if x > 700.0:  # exp overflows; the utility is 0 to double precision
            return 0.0
        return self.gamma1 / (1.0 + math.exp(x))


@dataclass(frozen=True, slots=True)
class DeadlineUtility:
    """Full ``value`` until ``deadline_s``, then decays linearly to 0 over ``grace_s``."""

    value: float
    deadline_s: float
    grace_s: float = 0.0

    def __call__(self, jct_s: float) -> float:
        if jct_s <= self.deadline_s:
            return self.value
        if self.grace_s <= 0:
            return 0.0
        return max(0.0, self.value * (1.0 - (jct_s - self.deadline_s) / self.grace_s))
