"""The SDK's rendezvous listens on the address the executor gave (127.0.0.1 on one machine),
never on every interface, which is what ``torch.distributed``'s own TCPStore does."""

from __future__ import annotations

import socket
from datetime import timedelta

from torch._C._distributed_c10d import TCPStore

from stint.torch.job import rendezvous_store


def _listening_on(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) of sockets listening on ``port``."""
    out = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as f:
            for line in list(f)[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.rsplit(":", 1)
                if state == "0A" and int(p, 16) == port:  # 0A: LISTEN
                    out.add(addr)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_rank_0_serves_the_rendezvous_on_loopback_only() -> None:
    port = _free_port()
    master = rendezvous_store("127.0.0.1", port, 1, True, 10.0)  # 1: it does not wait here
    worker = rendezvous_store("127.0.0.1", port, 1, False, 10.0)
    worker.set("k", "v")
    assert master.get("k") == b"v"
    assert _listening_on(port) == {"0100007F"}  # 127.0.0.1, nothing else


def test_the_check_sees_a_store_on_every_interface() -> None:
    port = _free_port()
    store = TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=10))  # torch's own default
    assert _listening_on(port) - {"0100007F"}  # it listens on the wildcard address too
    del store
