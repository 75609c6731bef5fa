"""Rendezvous port ranges: parsed or refused with a message saying what is wrong, and a pick
that stays in the range, skips ports in use or handed out, and fails naming the range."""

from __future__ import annotations

import random
import socket

import pytest

from stint.ports import PortRange, PortRangeError, parse_ports, pick_port


def test_a_range_or_one_port_parses() -> None:
    assert parse_ports("29500-29600") == PortRange(29500, 29600)
    assert parse_ports(" 29500 ") == PortRange(29500, 29500)
    assert (len(PortRange(29500, 29600)), str(PortRange(7, 7)), 29600 in PortRange(29500, 29600)) \
        == (101, "7", True)


@pytest.mark.parametrize(("text", "says"), [
    ("29600-29500", "the first port is above the last (write it as 29500-29600)"),
    ("0-10", "port 0 is outside 1..65535"),
    ("29500-70000", "port 70000 is outside 1..65535"),
    ("29500:29600", "expected FIRST-LAST (e.g. 29500-29600) or one port"),
    ("", "expected FIRST-LAST"),
    ("a-b", "expected FIRST-LAST"),
])
def test_a_bad_range_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(PortRangeError, match=".*" + says.replace("(", r"\(").replace(")", r"\)")):
        parse_ports(text)


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_a_pick_skips_ports_in_use_and_those_handed_out_and_fails_when_none_is_left() -> None:
    with _listening() as a, _listening() as b:
        pa, pb = a.getsockname()[1], b.getsockname()[1]
        lo, hi = min(pa, pb), max(pa, pb)
        wide = PortRange(lo, hi)
        for seed in range(5):  # whatever port the probe starts at
            got = pick_port(wide, rng=random.Random(seed))
            assert got in wide and got not in (pa, pb)
        with pytest.raises(OSError, match=f"no free port in {pa} on 127.0.0.1: all 1 are in use"):
            pick_port(PortRange(pa, pa))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(OSError, match="no free port"):
        pick_port(PortRange(free, free), avoid={free})
    assert pick_port(PortRange(free, free)) == free
