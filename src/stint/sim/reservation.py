"""A daily inference reservation: nodes taken back from training at peak hours, given back at
night (Singularity's motivating case: inference peaks by day, training fills the night).

``Reservation(peak=0.3, start_h=9, end_h=21, ramp_h=0)`` reserves ``k = round(peak x nodes)``
whole nodes (at least one) every day from ``start_h`` to ``end_h``, hours of the trace's clock:
hour of day = (``clock0_s`` + trace time) / 3600 mod 24, where ``clock0_s`` is the time of day of
the trace's first job (Philly's timestamps) or 0 (traces without a clock start at midnight). With
a ramp the nodes come and go one at a time: slot i of k (i = 0 .. k-1) is reserved from
``start + ramp x i / k`` to ``end - ramp x i / k``, so the reserved count climbs over the first
``ramp_h`` hours of the window and falls over its last. A window may wrap midnight
(``start=20,end=6``).

The simulator enacts a slot as it enacts a node failure (``stint.sim.engine``): it picks the
node, among those up and not reserved, with the fewest GPUs in use, ties broken by a seeded
order of the nodes (``seed``); a job on it is shrunk onto its other nodes if it can run there
(a resize, its cost charged), else preempted (a checkpoint: charged as the resume's cost); the
node then shows as down in the ``ClusterView`` until the slot ends, so every policy sees the
reduced capacity. Reserved GPU-hours are counted and left out of the utilization denominator
(``summary.json``: ``reserved_gpu_hours``, ``utilization_basis``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class Span:
    """Reservation slot ``slot`` holds a node from ``take_s`` to ``give_s`` (trace time)."""

    slot: int
    take_s: float
    give_s: float


@dataclass(frozen=True, slots=True)
class Reservation:
    peak: float  # share of the cluster's nodes reserved at peak
    start_h: float = 9.0
    end_h: float = 21.0
    ramp_h: float = 0.0
    seed: int = 0  # the order in which equally busy nodes are taken
    clock0_s: float = 0.0  # time of day (s after midnight) at trace time 0

    def __post_init__(self) -> None:
        if not 0.0 < self.peak <= 1.0:
            raise ValueError(f"reservation: peak must be in (0, 1] (got {self.peak:g})")
        for key, v in (("start", self.start_h), ("end", self.end_h)):
            if not 0.0 <= v <= 24.0:
                raise ValueError(f"reservation: {key} must be an hour in [0, 24] (got {v:g})")
        if self.window_h <= 0.0:
            raise ValueError(f"reservation: start and end must differ (got {self.start_h:g})")
        if self.ramp_h < 0.0 or 2.0 * self.ramp_h > self.window_h:
            raise ValueError(f"reservation: ramp must be >= 0 and at most half the window of "
                             f"{self.window_h:g} h (got {self.ramp_h:g})")

    @property
    def window_h(self) -> float:
        """Hours reserved per day (a window from 20 to 6 lasts 10 h)."""
        return (self.end_h - self.start_h) % 24.0

    @staticmethod
    def parse(text: str, seed: int = 0) -> Reservation:
        """``peak=0.3,start=9,end=21[,ramp=1]`` (``stint sim --reservation``)."""
        keys = {"peak": "peak", "start": "start_h", "end": "end_h", "ramp": "ramp_h"}
        got: dict[str, float] = {}
        for part in text.split(","):
            key, sep, value = part.strip().partition("=")
            if not sep or key not in keys:
                raise ValueError(f"--reservation {text!r}: expected peak=F,start=H,end=H[,ramp=H] "
                                 f"(got {part!r})")
            try:
                got[keys[key]] = float(value)
            except ValueError:
                raise ValueError(f"--reservation {text!r}: {key} {value!r} is not a number") from None
        if "peak" not in got:
            raise ValueError(f"--reservation {text!r}: peak=F (the share of nodes reserved) is required")
        return Reservation(seed=seed, **got)

    def slots(self, nodes: int) -> int:
        """How many whole nodes are reserved at peak: ``round(peak x nodes)``, at least 1."""
        return min(nodes, max(1, math.floor(self.peak * nodes + 0.5)))

    def spans(self, from_s: float, nodes: int) -> Iterator[Span]:
        """Every slot's span that ends after ``from_s``, in order of ``take_s`` (endless)."""
        k = self.slots(nodes)
        if k <= 0:
            return
        ramp_s, window_s = self.ramp_h * 3600.0, self.window_h * 3600.0
        # The day whose window opens at or before from_s (a window may still be open then).
        day = math.floor((from_s + self.clock0_s - self.start_h * 3600.0) / DAY_S)
        while True:
            opens = day * DAY_S + self.start_h * 3600.0 - self.clock0_s
            for i in range(k):
                take, give = opens + ramp_s * i / k, opens + window_s - ramp_s * i / k
                if give > from_s:
                    yield Span(i, max(take, from_s), give)
            day += 1

    def node_order(self, nodes: int) -> list[int]:
        """The seeded tie-break: node ids in the order equally busy nodes are taken."""
        order = list(range(nodes))
        random.Random(self.seed).shuffle(order)
        return order

    def as_dict(self) -> dict[str, float]:
        """What ``summary.json`` states as ``reservation``."""
        return {"peak": self.peak, "start_h": self.start_h, "end_h": self.end_h, "ramp_h": self.ramp_h,
                "seed": self.seed, "clock0_s": self.clock0_s}
