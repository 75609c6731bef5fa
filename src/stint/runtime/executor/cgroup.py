"""The kernel's limits on one worker's process tree: a cgroup per worker.

Loaded by the supervisor (``shim.py``: root, ``python -I``, by file path), so it imports only the
standard library and works loaded with ``importlib.util.spec_from_file_location`` (no
``from __future__ import annotations``: ``dataclasses`` would then look the module up in
``sys.modules``, where such a loader need not put it).

Layout: ``<mount>/<parent>/<name>`` in each hierarchy used (``parent`` is ``stint``, ``name`` is
``<sid>-<job>-<attempt>-<rank>``). On a cgroup v2 host that is one directory, where the memory,
pids and cpu controllers all apply; on a v1 host it is one directory per controller mount:
memory, pids, cpu when mounted, and freezer when mounted (used only to stop a tree while it is
killed, so no process forks past the kill).

Limits written: v2 ``memory.max`` (and ``memory.swap.max`` 0 when bounded, so swap does not
extend the bound), ``pids.max``, ``cpu.weight``; v1 ``memory.limit_in_bytes`` (and
``memory.memsw.limit_in_bytes`` likewise), ``pids.max``, ``cpu.shares``. Where the kernel has
no cgroups for us (not root, no controllers, a refusal) ``detect`` says why (``Host.kind``
"none") and ``apply_rlimits`` is the weaker fallback.
"""

import errno
import os
import re
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"{what} {name!r}: must be 1-255 characters of [A-Za-z0-9._-], "
                         "not '.' or '..'")


@dataclass(frozen=True, slots=True)
class Bounds:
    """What the kernel bounds for one worker's process tree.

    ``memory_max``: bytes of memory (v1: the kernel rounds it to pages); None: no bound.
    ``pids_max``: processes and threads, all of the tree's together; None: no bound.
    ``cpu_weight``: relative CPU share among busy cgroups, 1..10000 (100 is the default share;
    v2 ``cpu.weight``; v1 ``cpu.shares`` = weight * 1024 // 100).
    """

    memory_max: int | None
    pids_max: int | None
    cpu_weight: int = 100

    def __post_init__(self) -> None:
        if self.memory_max is not None and (type(self.memory_max) is not int
                                            or self.memory_max < 1):
            raise ValueError(f"bounds: memory_max must be a byte count >= 1 or None, "
                             f"not {self.memory_max!r}")
        if self.pids_max is not None and (type(self.pids_max) is not int or self.pids_max < 1):
            raise ValueError(f"bounds: pids_max must be a count >= 1 or None, "
                             f"not {self.pids_max!r}")
        if type(self.cpu_weight) is not int or not 1 <= self.cpu_weight <= 10000:
            raise ValueError(f"bounds: cpu_weight must be in 1..10000, not {self.cpu_weight!r}")


@dataclass(frozen=True, slots=True)
class Host:
    """Which cgroups this host offers us, and where.

    ``kind``: "v2", "v1" or "none". ``reason``: for "none" why not (not root, no controllers, the
    kernel refused); otherwise one line naming the directories, for a start-up log.
    ``parents``: the directory under which workers' cgroups are made, one per hierarchy used
    (v2: one). ``memory``, ``pids``, ``cpu``, ``freezer``: the one of ``parents`` where that
    controller applies, None where it is not available (v2 has no freezer controller: it kills
    with ``cgroup.kill``).
    """

    kind: str
    reason: str
    parents: tuple[str, ...] = ()
    memory: str | None = None
    pids: str | None = None
    cpu: str | None = None
    freezer: str | None = None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    """Write ``text`` to a cgroup file with one ``write`` (the kernel acts on each write); the
    OSError names the file and what was written."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    except OSError as e:
        raise OSError(e.errno, f"{e.strerror} (writing {text!r})", path) from None
    finally:
        os.close(fd)


def _mkdir(path: str) -> None:
    try:
        os.mkdir(path)
    except FileExistsError:
        pass


def _cgroup_mounts(mountinfo: str) -> list[tuple[str, str, set[str]]]:
    """(mount point, "cgroup" or "cgroup2", super options) of each cgroup mount in the table."""
    mounts = []
    with open(mountinfo) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                mounts.append((point, tail[0], set(tail[2].split(","))))
    return mounts


def _controllers(mount: str) -> set[str]:
    try:
        return set(_read(os.path.join(mount, "cgroup.controllers")).split())
    except OSError:
        return set()


def detect(parent: str = "stint", mountinfo: str = "/proc/self/mountinfo") -> Host:
    """Find the cgroups of this host from ``mountinfo`` and make ``<mount>/<parent>`` in each
    hierarchy used.

    v2 when a cgroup2 mount offers the memory and pids controllers: they (and cpu, if it can be
    enabled) are enabled in ``cgroup.subtree_control`` of the mount's root and of the parent.
    v1 when memory and pids are mounted as v1 hierarchies (cpu and freezer are used if mounted).
    "none" when not root, when neither is there, or when the kernel refuses (e.g. the mount's
    root is a container's cgroup holding processes: the no-internal-processes rule forbids
    enabling controllers there); ``reason`` says which. ValueError for a bad ``parent``.
    """
    _check_name(parent, "cgroup parent")
    if os.geteuid() != 0:
        return Host("none", "not root: only root may create cgroups")
    try:
        mounts = _cgroup_mounts(mountinfo)
    except OSError as e:
        return Host("none", f"cannot read {mountinfo}: {e.strerror}")
    for point, fstype, _ in mounts:
        if fstype == "cgroup2" and {"memory", "pids"} <= _controllers(point):
            return _v2_host(point, parent)
    v1: dict[str, str] = {}
    for ctrl in ("memory", "pids", "cpu", "freezer"):
        for point, fstype, options in mounts:
            if fstype == "cgroup" and ctrl in options:
                v1.setdefault(ctrl, point)
    missing = [c for c in ("memory", "pids") if c not in v1]
    if missing:
        return Host("none", "no cgroup2 mount with the memory and pids controllers, and no "
                            f"cgroup v1 mount of {' or '.join(missing)}")
    return _v1_host(v1, parent)


def _enable(directory: str, cpu: bool) -> bool:
    """Enable memory and pids (OSError if refused) and, if ``cpu``, cpu (best effort: the
    kernel refuses it while real-time threads run outside the root cgroup) for the children of
    a v2 cgroup; whether cpu is enabled."""
    path = os.path.join(directory, "cgroup.subtree_control")
    enabled = _read(path).split()
    for ctrl in ("memory", "pids", "cpu") if cpu else ("memory", "pids"):
        if ctrl not in enabled:
            try:
                _write(path, f"+{ctrl}")
            except OSError:
                if ctrl != "cpu":
                    raise
                return False
    return cpu


def _v2_host(mount: str, parent: str) -> Host:
    top = os.path.join(mount, parent)
    try:
        cpu = _enable(mount, "cpu" in _controllers(mount))
        _mkdir(top)
        cpu = _enable(top, cpu)
    except OSError as e:
        why = (" (a cgroup that holds processes cannot give controllers to its children: the "
               "no-internal-processes rule)") if e.errno == errno.EBUSY else ""
        return Host("none", f"cgroup v2 at {mount}: {e}{why}")
    return Host("v2", f"cgroup v2: workers under {top} (memory, pids{', cpu' if cpu else ''})",
                (top,), top, top, top if cpu else None)


def _v1_host(mounts: dict[str, str], parent: str) -> Host:
    dirs = {ctrl: os.path.join(point, parent) for ctrl, point in mounts.items()}
    try:
        for d in dirs.values():
            _mkdir(d)
    except OSError as e:
        return Host("none", f"cgroup v1: cannot create {e.filename}: {e.strerror}")
    return Host("v1", "cgroup v1: workers under " + ", ".join(f"{d} ({c})" for c, d in
                                                             dirs.items()),
                tuple(dict.fromkeys(dirs.values())), dirs["memory"], dirs["pids"],
                dirs.get("cpu"), dirs.get("freezer"))


@dataclass(frozen=True, slots=True)
class WorkerCgroup:
    """The cgroup of one worker's process tree: ``<parent>/<name>`` in each of the host's
    hierarchies. ``WorkerCgroup(name, host)`` names one that may exist (to kill or remove it
    after a restart); ``create`` makes it and writes its limits."""

    name: str
    host: Host

    def __post_init__(self) -> None:
        _check_name(self.name, "cgroup name")
        if self.host.kind == "none":
            raise ValueError(f"no cgroups on this host: {self.host.reason}")

    @property
    def dirs(self) -> tuple[str, ...]:
        """Its directory in each hierarchy."""
        return tuple(os.path.join(p, self.name) for p in self.host.parents)

    def _file(self, parent: str, name: str) -> str:
        return os.path.join(parent, self.name, name)

    @classmethod
    def create(cls, name: str, bounds: Bounds, host: Host) -> "WorkerCgroup":
        """Make the cgroup ``name`` (``[A-Za-z0-9._-]+``; ValueError otherwise) and write
        ``bounds``. One that exists is reused and its limits rewritten (a restarted supervisor
        creates it again). OSError if the kernel refuses a limit (the directories stay:
        ``remove`` them)."""
        cg = cls(name, host)
        for d in cg.dirs:
            _mkdir(d)
        cg._write_limits(bounds)
        return cg

    def _write_limits(self, b: Bounds) -> None:
        h, v2 = self.host, self.host.kind == "v2"
        if h.pids is not None:
            _write(self._file(h.pids, "pids.max"), "max" if b.pids_max is None else str(b.pids_max))
        if h.cpu is not None:
            if v2:
                _write(self._file(h.cpu, "cpu.weight"), str(b.cpu_weight))
            else:
                _write(self._file(h.cpu, "cpu.shares"), str(max(2, b.cpu_weight * 1024 // 100)))
        if h.memory is None:
            return
        if v2:
            _write(self._file(h.memory, "memory.max"),
                   "max" if b.memory_max is None else str(b.memory_max))
            swap = self._file(h.memory, "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, "max" if b.memory_max is None else "0")
            return
        # v1: memory+swap must stay >= memory at every step, so the order depends on the change.
        value = "-1" if b.memory_max is None else str(b.memory_max)
        files = [self._file(h.memory, "memory.limit_in_bytes")]
        memsw = self._file(h.memory, "memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):
            files.append(memsw)
        try:
            for f in files:
                _write(f, value)
        except OSError as e:
            if e.errno != errno.EINVAL or len(files) == 1:
                raise
            for f in reversed(files):
                _write(f, value)

    def join(self) -> None:
        """Move the calling process into this cgroup (write "0" to each ``cgroup.procs``).

        For a forked child before ``exec`` (a ``preexec_fn``), while it is still root: starts
        no thread, logs nothing; OSError if the kernel refuses. Root is needed (the files are
        root's), and ``subprocess`` switches ``user=``/``group=`` *before* ``preexec_fn``: a
        worker of another account joins first, then switches ids itself."""
        for d in self.dirs:
            _write(os.path.join(d, "cgroup.procs"), "0")

    def pids(self) -> list[int]:
        """The processes in it (in any of its hierarchies), ascending; [] if it is gone."""
        found: set[int] = set()
        for d in self.dirs:
            try:
                found.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split())
            except FileNotFoundError:
                pass
        return sorted(found)

    def kill_all(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process in it, again and again, until it is empty or ``timeout_s`` has
        passed; whether it is empty. v2: ``cgroup.kill`` (the kernel kills forks that race it).
        v1: the tree is frozen (if the freezer is mounted), each listed process killed, then
        thawed so that they die; without a freezer a fork may escape a round and die in the
        next."""
        deadline = time.monotonic() + timeout_s
        while self.pids():
            if time.monotonic() >= deadline:
                return False
            self._kill_round(deadline)
            settle = min(deadline, time.monotonic() + 0.25)
            while self.pids() and time.monotonic() < settle:
                time.sleep(0.01)
        return True

    def _kill_round(self, deadline: float) -> None:
        h = self.host
        if h.kind == "v2" and os.path.exists(kill := os.path.join(self.dirs[0], "cgroup.kill")):
            _write(kill, "1")
            return
        state = None if h.freezer is None else self._file(h.freezer, "freezer.state")
        try:
            if state is not None:
                _write(state, "FROZEN")
                until = min(deadline, time.monotonic() + 1.0)  # a task in D state may not freeze
                while _read(state).strip() != "FROZEN" and time.monotonic() < until:
                    time.sleep(0.005)
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        finally:
            if state is not None:
                _write(state, "THAWED")

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for want of memory (v2 ``memory.events``,
        v1 ``memory.oom_control``: ``oom_kill``); 0 without the memory controller or once gone."""
        h = self.host
        if h.memory is None:
            return 0
        name = "memory.events" if h.kind == "v2" else "memory.oom_control"
        try:
            text = _read(self._file(h.memory, name))
        except FileNotFoundError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        """Remove its directories (after ``kill_all``). Already gone is fine; OSError (EBUSY)
        while processes remain."""
        for d in self.dirs:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass


def sweep(host: Host, keep: Callable[[str], bool]) -> list[str]:
    """Remove the workers' cgroups under ``host`` that ``keep(name)`` rejects and that hold no
    process (left by a supervisor that died; a busy one is left alone); the names removed."""
    names: set[str] = set()
    for parent in host.parents:
        try:
            names.update(e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            pass
    removed = []
    for name in sorted(names):
        if not _NAME.fullmatch(name) or keep(name):
            continue
        cg = WorkerCgroup(name, host)
        if cg.pids():
            continue
        try:
            cg.remove()
        except OSError:  # a process joined meanwhile
            continue
        removed.append(name)
    return removed


def _lower(limit: int, value: int) -> None:
    _, hard = resource.getrlimit(limit)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(limit, (value, value))


def apply_rlimits(bounds: Bounds) -> None:
    """The fallback where ``detect`` found no cgroups: bound the calling process (a
    ``preexec_fn``) by rlimits, which its children inherit. Weaker than a cgroup:
    ``RLIMIT_AS = memory_max`` bounds each process's virtual address space, not the tree's
    memory (mappings count, resident pages of other processes do not); ``RLIMIT_NPROC =
    pids_max`` counts every process of the real uid, not just this tree, and does not bind
    root. ``cpu_weight`` is not applied."""
    if bounds.memory_max is not None:
        _lower(resource.RLIMIT_AS, bounds.memory_max)
    if bounds.pids_max is not None:
        _lower(resource.RLIMIT_NPROC, bounds.pids_max)


def describe_oom(bounds: Bounds) -> str:
    """The reason recorded for a worker the kernel killed for memory."""
    if bounds.memory_max is None:
        return "out of memory (no memory.max: the host ran out)"
    return f"out of memory (memory.max {bounds.memory_max})"
