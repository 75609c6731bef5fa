"""What every performance model is: how fast a job trains on an allocation."""

from __future__ import annotations

from typing import Protocol

from stint.model.allocation import Allocation
from stint.model.job import JobSpec


class PerfModel(Protocol):
    """How fast a job trains on an allocation, in its work units per second."""

    def rate(self, spec: JobSpec, allocation: Allocation) -> float: ...
