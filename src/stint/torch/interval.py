"""When to take a periodic checkpoint: a fixed interval, or one derived from measured cost and MTBF.

Pure functions of their arguments; the job passes in what it measured (time is an argument).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_interval(cost: float, mtbf: float) -> float:
    """Young (1974): the compute time between checkpoints that minimises expected waste, sqrt(2 C M)."""
    return math.sqrt(2.0 * cost * mtbf)


def daly_interval(cost: float, mtbf: float) -> float:
    """Daly (2006), higher-order estimate of the optimum checkpoint interval.

    T = sqrt(2 C M) * (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C   for C < 2M, else T = M.
    """
    if cost >= 2.0 * mtbf:
        return mtbf
    r = cost / (2.0 * mtbf)
    return math.sqrt(2.0 * cost * mtbf) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - cost


@dataclass(frozen=True)
class Interval:
    """Checkpoint every ``steps`` steps, or every ``seconds``, or at Daly's optimum for ``mtbf``.

    With ``mtbf`` (mean time between failures, seconds) the interval follows the measured cost of
    the job's own checkpoints; before the first one is measured it checkpoints at the first chance.
    With nothing set, there are no periodic checkpoints (preemption still checkpoints).
    """

    steps: int | None = None
    seconds: float | None = None
    mtbf: float | None = None

    def __post_init__(self) -> None:
        for name in ("steps", "seconds", "mtbf"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"Interval.{name}={value} must be positive")

    def due(self, steps_since: int, seconds_since: float, cost: float | None) -> bool:
        """Whether a checkpoint is due, ``steps_since``/``seconds_since`` the last one (or the start)."""
        if self.steps is not None and steps_since >= self.steps:
            return True
        if self.seconds is not None and seconds_since >= self.seconds:
            return True
        if self.mtbf is not None:
            return cost is None or seconds_since >= daly_interval(cost, self.mtbf)
        return False
