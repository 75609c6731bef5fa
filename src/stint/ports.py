"""Rendezvous port ranges: the ports a job's rank 0 may listen on (``MASTER_PORT``).

A range is written ``"FIRST-LAST"`` (both included) or one port ``"PORT"``; the launcher takes it
as ``--port`` and the control plane's local executor as ``[executor] ports`` (``stint serve
--job-ports``). :func:`pick_port` probes the range, in an order that starts at a random port,
for one free on the address the rendezvous binds.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Collection
from dataclasses import dataclass

MAX_PORT = 65535


class PortRangeError(ValueError):
    """A port range that cannot be used, the message saying why and what is expected."""


@dataclass(frozen=True, slots=True)
class PortRange:
    """The ports ``first`` to ``last``, both included (1 <= first <= last <= 65535)."""

    first: int
    last: int

    def __post_init__(self) -> None:
        for p in (self.first, self.last):
            if not 1 <= p <= MAX_PORT:
                raise PortRangeError(f"port range {self}: port {p} is outside 1..{MAX_PORT}")
        if self.first > self.last:
            raise PortRangeError(f"port range {self}: the first port is above the last "
                                 f"(write it as {self.last}-{self.first})")

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"

    def __len__(self) -> int:
        return self.last - self.first + 1

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.first <= port <= self.last


def parse_ports(text: str) -> PortRange:
    """``"29500-29600"`` or ``"29500"`` as a PortRange; PortRangeError naming what is wrong."""
    first, dash, last = text.strip().partition("-")
    try:
        lo = int(first)
        hi = int(last) if dash else lo
    except ValueError:
        raise PortRangeError(f"port range {text!r}: expected FIRST-LAST (e.g. 29500-29600) or "
                             "one port (e.g. 29500)") from None
    return PortRange(lo, hi)


def pick_port(ports: PortRange, host: str = "127.0.0.1", avoid: Collection[int] = (),
              rng: random.Random | None = None) -> int:
    """A port of ``ports`` that can be bound on ``host`` now and is not in ``avoid`` (ports
    handed out already and maybe not bound yet). Probed from a random start, each once; an
    OSError naming the range when none is free."""
    start = (rng or random).randrange(len(ports))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for i in range(len(ports)):
        port = ports.first + (start + i) % len(ports)
        if port in avoid:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port in {ports} on {host}: all {len(ports)} are in use "
                  "(widen the range)")
