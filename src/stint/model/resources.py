"""Resource vectors: GPUs, CPU cores, memory and network bandwidth."""

from __future__ import annotations

from dataclasses import dataclass

RESOURCE_NAMES = ("gpu", "cpu", "mem_gb", "net_gbps")


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of each resource type. Units: GPUs, cores, GiB, Gbit/s."""

    gpu: float = 0.0
    cpu: float = 0.0
    mem_gb: float = 0.0
    net_gbps: float = 0.0

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.gpu, self.cpu, self.mem_gb, self.net_gbps)

    def __add__(self, other: Resources) -> Resources:
        return Resources(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def __sub__(self, other: Resources) -> Resources:
        return Resources(*(a - b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def scaled(self, factor: float) -> Resources:
        return Resources(*(a * factor for a in self.as_tuple()))

    def fits_in(self, capacity: Resources) -> bool:
        """True if every component is at most the capacity's (with a small float tolerance)."""
        return all(a <= c + 1e-9 for a, c in zip(self.as_tuple(), capacity.as_tuple()))

    def max_copies_in(self, capacity: Resources) -> int:
        """How many copies of this demand fit in ``capacity`` (ignores zero components)."""
        counts = [
            int((c + 1e-9) // a) for a, c in zip(self.as_tuple(), capacity.as_tuple()) if a > 0
        ]
        return min(counts) if counts else 0
