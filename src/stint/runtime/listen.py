"""The TCP listeners stint serves HTTP from: the API of ``stint serve``, the fleet's executor
agents and the copy services.

Every connection they accept has ``TCP_NODELAY`` set. An HTTP answer leaves in more than one
write (the head, then the body); with Nagle's algorithm on, the second write waits for the
peer's ACK of the first, which a client holding a kept-alive connection delays by ~40 ms, so
every request on that connection stalls that long (about 20 requests/s instead of hundreds).

- ``listen``: a bound, listening socket for uvicorn (``server.run(sockets=[...])``). uvicorn
  does not touch a socket it is given; asyncio sets ``TCP_NODELAY`` on each accepted connection
  only when its socket's protocol is ``IPPROTO_TCP`` (``socket.create_server`` leaves it 0), so
  the socket is made with that protocol, and has the option itself, which Linux copies to the
  connections it accepts.
- ``HTTPServer``: the threaded stdlib server of the agents, setting the option on every
  connection it accepts.
"""

from __future__ import annotations

import socket
from http.server import ThreadingHTTPServer
from typing import Any


def set_nodelay(sock: socket.socket) -> None:
    """Send small writes at once (Nagle's algorithm off) on a TCP socket."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: any; IPv6 when ``host`` has a colon),
    with ``TCP_NODELAY`` for every connection it accepts. Raises ``OSError`` as ``bind`` does."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        set_nodelay(sock)
        sock.bind((host, port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


class HTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` (one daemon thread per connection) whose every accepted
    connection has ``TCP_NODELAY``."""

    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, addr = super().get_request()
        set_nodelay(conn)
        return conn, addr
