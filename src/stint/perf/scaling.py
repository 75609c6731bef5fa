"""A scaling model for traces that carry only a GPU count and a duration (e.g. Philly).

A job's ``work`` is its recorded run time in seconds at ``requested_workers``, so on its requested
size it progresses at exactly 1 work unit per second. Other sizes follow Amdahl's law with a
serial fraction ``serial`` (0 = linear scaling), and each node beyond the first the job spans costs
``spread_penalty`` of its speed (a crude stand-in for cross-node communication; 0 by default so
that a trace's recorded durations are reproduced whatever the placement).
"""

from __future__ import annotations

from dataclasses import dataclass

from stint.model.allocation import Allocation
from stint.model.job import JobSpec


@dataclass(frozen=True, slots=True)
class ScalingModel:
    serial: float = 0.0
    spread_penalty: float = 0.0

    def speedup(self, workers: int) -> float:
        """Amdahl speed-up of ``workers`` over one worker."""
        return workers / (1.0 + self.serial * (workers - 1))

    def rate(self, spec: JobSpec, allocation: Allocation) -> float:
        n = allocation.num_workers
        if n == 0:
            return 0.0
        if n == spec.requested_workers and self.spread_penalty == 0.0:
            return 1.0  # the common case, kept exact: recorded durations are reproduced bit for bit
        r = self.speedup(n) / self.speedup(spec.requested_workers)
        extra_nodes = max(0, allocation.num_nodes - 1)
        return r * max(0.0, 1.0 - self.spread_penalty * extra_nodes)
