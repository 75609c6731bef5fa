"""Private network namespaces for the attempts of a job that runs on one machine.

A job's workers rendezvous over TCP on 127.0.0.1 (torch's TCPStore, then gloo). In the host's
network namespace any local account can find that port in ``/proc/net/tcp`` and talk to the
store. Each attempt therefore runs in a namespace of its own that has only a loopback interface:
its store and collectives are reachable by its own workers only, and its ports are listed only
in its own ``/proc/net/tcp``.

The namespaces are named (``/run/netns/NAME``, made and removed with iproute2's ``ip netns``) so
that a supervisor can join one by name before it starts its worker, and a restarted executor can
find and remove those its predecessor left (:func:`names`).

Loaded by the supervisor (``shim.py``, run as root under ``python -I``) by file path: this module
imports only the standard library and none of stint.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
IP_TIMEOUT_S = 10.0
# ``ip`` runs with this environment only: the caller's PATH, locale or LD_* variables play no part.
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
# No leading '-' (``ip`` would read an option) or '.' (no ``.`` or ``..`` under /run/netns).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


def unavailable() -> str | None:
    """None if private namespaces can be made here, else why not (for a start-up log).

    Checks root, ``ip`` and ``/run/netns``, then makes and removes a probe namespace: a root
    without CAP_SYS_ADMIN (in some containers) fails only there.
    """
    if os.geteuid() != 0:
        return "network namespaces need root"
    if _ip_path() is None:
        return f"no `ip` command (iproute2) on {_ENV['PATH']}"
    if os.path.exists(NETNS_DIR) and not os.path.isdir(NETNS_DIR):
        return f"{NETNS_DIR} is not a directory"
    probe = f"stint-probe-{os.getpid()}"
    try:
        create(probe)
        delete(probe)
    except OSError as e:
        return f"cannot make a network namespace: {e}"
    return None


def create(name: str) -> None:
    """Make namespace ``name`` (if it does not exist) with its loopback interface up.

    Raises OSError with ``ip``'s message on failure; ValueError for a malformed name.
    """
    path = _path(name)
    if not os.path.exists(path):
        try:
            _ip("netns", "add", name)
        except OSError:
            if not os.path.exists(path):  # not made by a concurrent create(name)
                raise
    _ip("-n", name, "link", "set", "lo", "up")


def join(name: str) -> None:
    """Move the calling process into namespace ``name``: sockets it opens from now on, and the
    processes it starts, live there.

    The kernel moves the calling thread only, so the process must have a single thread (a
    supervisor before it starts its worker); RuntimeError otherwise.
    """
    path = _path(name)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # (FileNotFoundError: no such namespace)
    try:
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise RuntimeError(f"netns.join({name!r}): the process has {threads} threads, not 1")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into the network namespace: {os.strerror(err)}", path)
    finally:
        os.close(fd)


def delete(name: str) -> None:
    """Remove namespace ``name`` if it exists. Processes still inside keep it (unnamed, so no
    one else can join it) until they end."""
    path = _path(name)
    if not os.path.exists(path):
        return
    try:
        _ip("netns", "delete", name)
    except OSError:
        if os.path.exists(path):  # not removed by a concurrent delete(name)
            raise


def names(prefix: str) -> list[str]:
    """The existing namespaces whose name starts with ``prefix``, sorted."""
    try:
        entries = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in entries if n.startswith(prefix))


def _path(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(f"network namespace name {name!r}: expected 1-64 of [A-Za-z0-9._-], "
                         "not starting with '.' or '-'")
    return os.path.join(NETNS_DIR, name)


def _ip_path() -> str | None:
    return shutil.which("ip", path=_ENV["PATH"])


def _ip(*args: str) -> None:
    ip = _ip_path()
    if ip is None:
        raise FileNotFoundError(f"no `ip` command (iproute2) on {_ENV['PATH']}")
    cmd = [ip, *args]
    try:
        r = subprocess.run(cmd, env=_ENV, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=IP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"`{' '.join(cmd)}` took over {IP_TIMEOUT_S:g}s") from None
    if r.returncode != 0:
        why = r.stderr.strip() or f"exit code {r.returncode}"
        raise OSError(f"`{' '.join(cmd)}` failed: {why}")
