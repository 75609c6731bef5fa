"""Private network namespaces (``stint.runtime.executor.netns``): a job's rendezvous port is
reachable only from the namespace of its attempt.

Real namespaces, real processes, a real OS account (created with useradd, removed afterwards).
Every helper process loads the module by file path and joins its namespace before it opens a
socket, exactly as the supervisor does before it starts its worker. Root only.
"""

from __future__ import annotations

import os
import pwd
import select
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stint.runtime.executor import netns

MODULE = Path(netns.__file__).resolve()
SRC = MODULE.parents[3]  # the tree whose stint the torch helpers import
PY = sys.executable
_WHY = netns.unavailable()

pytestmark = pytest.mark.skipif(_WHY is not None and os.environ.get("CI") != "true",
                                reason=f"private network namespaces: {_WHY}")

# argv[1]: the namespace to join ("" = stay in the host's).
JOIN = (
    "import importlib.util, sys\n"
    f"spec = importlib.util.spec_from_file_location('stint_netns', {str(MODULE)!r})\n"
    "netns = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(netns)\n"
    "if sys.argv[1]:\n"
    "    netns.join(sys.argv[1])\n"
)
# argv[2]: the port. Serves "hello" to every connection on 127.0.0.1.
LISTEN = JOIN + (
    "import socket\n"
    "s = socket.socket()\n"
    "s.bind(('127.0.0.1', int(sys.argv[2])))\n"
    "s.listen(16)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    c, _ = s.accept()\n"
    "    c.sendall(b'hello')\n"
    "    c.close()\n"
)
CONNECT = JOIN + (
    "import errno, socket\n"
    "s = socket.socket()\n"
    "s.settimeout(10)\n"
    "try:\n"
    "    s.connect(('127.0.0.1', int(sys.argv[2])))\n"
    "    print('connected', s.recv(16).decode())\n"
    "except OSError as e:\n"
    "    print('failed', errno.errorcode.get(e.errno or 0, repr(e)))\n"
)
# The listening sockets on 127.0.0.1:argv[2] that /proc/net/tcp shows to this process.
SEES_LISTENER = (
    "def sees_listener(port):\n"
    "    want = '0100007F:%04X' % port\n"
    "    with open('/proc/net/tcp') as f:\n"
    "        rows = [line.split() for line in f.readlines()[1:]]\n"
    "    return any(r[1] == want and r[3] == '0A' for r in rows)\n"
)
# A job's rank 0: the store as the job builds it (stint.torch.job.rendezvous_store), then the
# value a client sets.
STORE_MASTER = JOIN + (
    "from stint.torch.job import rendezvous_store\n"
    "store = rendezvous_store('127.0.0.1', int(sys.argv[2]), 1, True, 60.0)\n"
    "print('ready', flush=True)\n"
    "print('got', store.get('from_a').decode(), flush=True)\n"
)
STORE_CLIENT = JOIN + (
    "from datetime import timedelta\n"
    "from torch._C._distributed_c10d import TCPStore\n"
    "store = TCPStore('127.0.0.1', int(sys.argv[2]), None, False, timedelta(seconds=30))\n"
    "store.set('from_a', 'hello')\n"
    "print('read', store.get('from_a').decode())\n"
)
# argv[3]: the account. Root imports torch, then becomes the account (the venv may live under
# root's 0700 home, out of the account's reach) and tries the port it would find in its table.
STORE_INTRUDER = JOIN + SEES_LISTENER + (
    "import os, pwd\n"
    "from datetime import timedelta\n"
    "from torch._C._distributed_c10d import TCPStore\n"
    "acct = pwd.getpwnam(sys.argv[3])\n"
    "os.setgroups([])\n"
    "os.setgid(acct.pw_gid)\n"
    "os.setuid(acct.pw_uid)\n"
    "port = int(sys.argv[2])\n"
    "print('uid', os.getuid(), 'sees', sees_listener(port))\n"
    "try:\n"
    "    store = TCPStore('127.0.0.1', port, None, False, timedelta(seconds=3))\n"
    "    store.set('from_a', 'intruder')\n"
    "    print('connected')\n"
    "except Exception as e:\n"
    "    print('failed', type(e).__name__, str(e).splitlines()[0])\n"
)
# argv[2]: the store's port, argv[3]: the rank of two. A gloo all-reduce over loopback as the
# job sets it up (GLOO_SOCKET_IFNAME=lo, the store from rendezvous_store).
GLOO_RANK = JOIN + (
    "import os\n"
    "os.environ['GLOO_SOCKET_IFNAME'] = 'lo'\n"
    "import torch, torch.distributed as dist\n"
    "from stint.torch.job import rendezvous_store\n"
    "rank = int(sys.argv[3])\n"
    "store = rendezvous_store('127.0.0.1', int(sys.argv[2]), 2, rank == 0, 60.0)\n"
    "dist.init_process_group('gloo', store=store, rank=rank, world_size=2)\n"
    "t = torch.tensor([rank + 1.0])\n"
    "dist.all_reduce(t)\n"
    "print('sum', int(t.item()))\n"
    "dist.destroy_process_group()\n"
)

Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def prefix() -> str:
    return f"stint-test-{uuid.uuid4().hex[:8]}-"


@pytest.fixture
def make_ns(prefix: str) -> Iterator[Callable[[str], str]]:
    """``make_ns(tag)`` creates namespace ``prefix + tag``; all are removed at the end."""
    if _WHY is not None:
        pytest.fail(f"private network namespaces must work in CI: {_WHY}")
    made: list[str] = []

    def make(tag: str) -> str:
        name = prefix + tag
        made.append(name)
        netns.create(name)
        return name

    try:
        yield make
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
        assert netns.names(prefix) == []


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """``spawn(code, ns, *args)`` starts ``python -c code ns *args``; killed at the end."""
    started: list[subprocess.Popen[str]] = []

    def start(code: str, ns: str, *args: str, isolated: bool = True) -> subprocess.Popen[str]:
        # -I as the supervisor runs; the torch helpers import this tree's stint instead.
        flags = ["-I"] if isolated else []
        env = None if isolated else {**os.environ, "PYTHONPATH": str(SRC)}
        p = subprocess.Popen([PY, *flags, "-c", code, ns, *args], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.communicate()


@pytest.fixture
def host_port() -> Iterator[int]:
    """A port held bound (not listening) on 127.0.0.1 in the host's namespace: a connection to
    it there is refused, whatever else runs on this machine."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    try:
        yield int(s.getsockname()[1])
    finally:
        s.close()


@pytest.fixture
def account() -> Iterator[str]:
    """A fresh OS account (own group, no home), deleted at the end."""
    if not shutil.which("useradd"):
        pytest.skip("needs useradd")
    name = f"stintn{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "-M", "-U", "-s", "/usr/sbin/nologin", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


def _ready(p: subprocess.Popen[str], timeout: float = 120.0) -> None:
    """Wait for the helper's ``ready`` line (a loaded machine imports torch slowly)."""
    assert p.stdout is not None
    readable, _, _ = select.select([p.stdout], [], [], timeout)
    line = p.stdout.readline() if readable else ""
    if line.strip() != "ready":
        p.kill()
        _, err = p.communicate()
        raise AssertionError(f"helper not ready ({line!r}): {err[-2000:]}")


def _output(p: subprocess.Popen[str], timeout: float = 120.0) -> str:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"helper exited {p.returncode}: {err[-2000:]}"
    return out.strip()


def test_listener_is_reachable_only_from_its_namespace(make_ns: Callable[[str], str],
                                                       spawn: Spawn, host_port: int) -> None:
    a, b = make_ns("a"), make_ns("b")
    port = str(host_port)
    _ready(spawn(LISTEN, a, port))
    assert _output(spawn(CONNECT, a, port)) == "connected hello"
    assert _output(spawn(CONNECT, "", port)) == "failed ECONNREFUSED"
    assert _output(spawn(CONNECT, b, port)) == "failed ECONNREFUSED"
    # The table where a local account looks for ports: the host's does not list it, A's does.
    probe = JOIN + SEES_LISTENER + "print(sees_listener(int(sys.argv[2])))\n"
    assert _output(spawn(probe, "", port)) == "False"
    assert _output(spawn(probe, a, port)) == "True"


@pytest.mark.slow
def test_store_refuses_another_account_outside_its_namespace(
        make_ns: Callable[[str], str], spawn: Spawn, host_port: int, account: str) -> None:
    a = make_ns("a")
    port = str(host_port)
    master = spawn(STORE_MASTER, a, port, isolated=False)
    _ready(master)
    uid = pwd.getpwnam(account).pw_uid
    intruder = _output(spawn(STORE_INTRUDER, "", port, account))
    assert intruder.startswith(f"uid {uid} sees False\nfailed "), intruder
    assert _output(spawn(STORE_CLIENT, a, port)) == "read hello"
    assert _output(master) == "got hello"


@pytest.mark.slow
def test_gloo_collective_runs_inside_a_loopback_only_namespace(
        make_ns: Callable[[str], str], spawn: Spawn, host_port: int) -> None:
    a = make_ns("a")
    ranks = [spawn(GLOO_RANK, a, str(host_port), str(r), isolated=False) for r in (0, 1)]
    assert [_output(p) for p in ranks] == ["sum 3", "sum 3"]


def test_create_and_delete_are_idempotent_and_names_lists_them(
        make_ns: Callable[[str], str], prefix: str) -> None:
    assert netns.names(prefix) == []
    a, b = make_ns("a"), make_ns("b")
    netns.create(a)  # again: no error, still one namespace
    assert netns.names(prefix) == [a, b]
    assert netns.names(prefix + "b") == [b]
    netns.delete(a)
    netns.delete(a)
    assert netns.names(prefix) == [b]
    assert not os.path.exists(os.path.join(netns.NETNS_DIR, a))
    with pytest.raises(FileNotFoundError):
        netns.join(a)
    netns.delete(b)
    assert netns.names(prefix) == []


@pytest.mark.parametrize("bad", ["", "..", "-n", "a/b", "x" * 65, "a b"])
def test_malformed_names_are_refused_before_ip_runs(bad: str, prefix: str) -> None:
    before = netns.names("")
    for call in (netns.create, netns.delete, netns.join):
        with pytest.raises(ValueError, match="network namespace name"):
            call(bad)
    assert netns.names("") == before
