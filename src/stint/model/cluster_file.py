"""The cluster file (``stint sim --cluster FILE``, ``stint serve --cluster FILE``): node groups by
accelerator type, each type's default speed, per-application speeds, and a throughput file.

```toml
throughputs = "simulation_throughputs.json"  # optional: Gavel's throughput file (path relative
                                             # to this file); read for Gavel traces' jobs
[[group]]
gpu_type = "v100"     # any name: a100, v100, t4, fpga-x, ...
nodes = 4
gpus_per_node = 8
speed = 1.0           # optional: the type's speed for jobs no table names [default: 1.0]

[[group]]
gpu_type = "k80"
nodes = 8
gpus_per_node = 4
speed = 0.3

[[group]]
gpu_type = "cpu"
nodes = 2
gpus_per_node = 1
role = "ps"           # optional: "ps" hosts parameter servers only, "worker" workers only,
                      # "any" both [default: "any"]; with a "ps" group, PSs run there alone
                      # (read by the parameter-server policies: oasis, fifo-fixed, drf-ps,
                      # rrh, dorm; the others place workers on any node)
cpus_per_node = 16    # optional: CPU cores and memory (GiB) of each node, which parameter
mem_gb_per_node = 64  # servers are placed by [default: 8 cores and 64 GiB per GPU]

[speeds.cifar10]      # optional: one application's throughput per type, relative to the
v100 = 1.0            # type its work is measured on (perf.types)
k80 = 0.35
```

Groups of one type may repeat (their nodes are one type). Nodes are named ``<type>-<i>``, numbered
per type from 0, in file order. Without ``gpu_type`` in any group the cluster is untyped and its
nodes are ``node-<i>``, numbered from 0 in file order. A group of role "ps" may have
``gpus_per_node = 0`` (CPU-only parameter-server hosts; it then needs ``cpus_per_node`` and
``mem_gb_per_node``). ``parse_cluster`` checks every key and value and names the file, line and
key of anything wrong (``ClusterFileError``).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass

from stint.model.cluster import Cluster, Node
from stint.model.limits import MAX_CLUSTER_GPUS, MAX_GPUS_PER_NODE, MAX_NODES, above
from stint.model.resources import Resources

GROUP_KEYS = ("gpu_type", "nodes", "gpus_per_node", "speed", "role", "cpus_per_node",
              "mem_gb_per_node")
ROLES = ("any", "worker", "ps")
TOP_KEYS = ("throughputs", "group", "speeds")
_TYPE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class ClusterFileError(ValueError):
    """A cluster file that cannot be used; the message names the file, line and key."""


@dataclass(frozen=True, slots=True)
class ClusterGroup:
    gpu_type: str
    nodes: int
    gpus_per_node: int
    speed: float = 1.0
    role: str = "any"  # what its nodes host: "any", "worker" or "ps" (``Node.role``)
    cpus_per_node: float | None = None  # None: the cluster's default per GPU
    mem_gb_per_node: float | None = None


@dataclass(frozen=True, slots=True)
class ClusterFile:
    """What a cluster file says: its groups, speeds per type and per (application, type), and the
    throughput file it names ("" if none; as written, relative to the file)."""

    groups: tuple[ClusterGroup, ...]
    speeds: dict[tuple[str, str], float]
    throughputs: str = ""

    @property
    def type_speeds(self) -> dict[str, float]:
        """Each type's default speed (a later group of a type overrides an earlier one's)."""
        return {g.gpu_type: g.speed for g in self.groups}

    def cluster(self, cpu_per_gpu: float = 8.0, mem_gb_per_gpu: float = 64.0, net_gbps: float = 100.0) -> Cluster:
        nodes: list[Node] = []
        count: dict[str, int] = {}
        for g in self.groups:
            cpus = g.cpus_per_node if g.cpus_per_node is not None else cpu_per_gpu * g.gpus_per_node
            mem = g.mem_gb_per_node if g.mem_gb_per_node is not None else mem_gb_per_gpu * g.gpus_per_node
            cap = Resources(gpu=g.gpus_per_node, cpu=cpus, mem_gb=mem, net_gbps=net_gbps)
            for _ in range(g.nodes):
                i = count.get(g.gpu_type, 0)
                count[g.gpu_type] = i + 1
                nodes.append(Node(f"{g.gpu_type or 'node'}-{i}", cap, g.role, g.gpu_type))
        return Cluster(tuple(nodes))


def parse_cluster(text: str, source: str) -> ClusterFile:
    """Read a cluster file's TOML ``text`` (``source`` names it in errors)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ClusterFileError(f"{source}: not valid TOML ({exc})") from None
    where = _Where(text, source)
    for key in raw:
        if key not in TOP_KEYS:
            raise where.error(key, f"unknown key {key!r}; valid: {', '.join(TOP_KEYS)}")
    groups_raw = raw.get("group", [])
    if not isinstance(groups_raw, list) or not groups_raw:
        raise ClusterFileError(f"{source}: a cluster file needs at least one [[group]] "
                               "(gpu_type, nodes, gpus_per_node)")
    groups = tuple(_group(where, i, g) for i, g in enumerate(groups_raw))
    if any(g.gpu_type for g in groups) and not all(g.gpu_type for g in groups):
        i = next(i for i, g in enumerate(groups) if not g.gpu_type)
        raise where.error("group", f"group {i + 1}: missing 'gpu_type' (every group names one, or "
                          "none does: an untyped cluster)", "group", i)
    total = sum(g.nodes * g.gpus_per_node for g in groups)
    if why := above("the cluster's GPUs", total, MAX_CLUSTER_GPUS) or above(
            "the cluster's nodes", sum(g.nodes for g in groups), MAX_NODES):
        raise ClusterFileError(f"{source}: {why}")
    throughputs = raw.get("throughputs", "")
    if not isinstance(throughputs, str):
        raise where.error("throughputs", f"throughputs must be a path (a string; got {throughputs!r})")
    return ClusterFile(groups, _speeds(where, raw.get("speeds", {})), throughputs)


def _group(where: _Where, i: int, g: object) -> ClusterGroup:
    if not isinstance(g, dict):
        raise where.error("group", f"group {i + 1} must be a table", "group", i)
    for key in g:
        if key not in GROUP_KEYS:
            raise where.error(key, f"group {i + 1}: unknown key {key!r}; valid: {', '.join(GROUP_KEYS)}", "group", i)
    for key in ("nodes", "gpus_per_node"):
        if key not in g:
            raise where.error("group", f"group {i + 1}: missing {key!r}", "group", i)
    t = g.get("gpu_type", "")
    if "gpu_type" in g and (not isinstance(t, str) or not _TYPE_NAME.match(t)):
        raise where.error("gpu_type", f"group {i + 1}: gpu_type must be a name of letters, digits, "
                          f"'.', '_' or '-' (at most 64; got {t!r})", "group", i)
    role = g.get("role", "any")
    if role not in ROLES:
        raise where.error("role", f"group {i + 1}: role must be one of {', '.join(ROLES)} "
                          f"(got {role!r})", "group", i)
    counts = {}
    for key, maximum in (("nodes", MAX_NODES), ("gpus_per_node", MAX_GPUS_PER_NODE)):
        v = g[key]
        least = 0 if key == "gpus_per_node" and role == "ps" else 1
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise where.error(key, f"group {i + 1}: {key} must be a whole number >= {least} "
                              f"(got {v!r})", "group", i)
        if why := above(key, v, maximum):
            raise where.error(key, f"group {i + 1}: {why}", "group", i)
        counts[key] = v
    speed = g.get("speed", 1.0)
    if not _positive(speed):
        raise where.error("speed", f"group {i + 1}: speed must be a positive number (got {speed!r})", "group", i)
    host: dict[str, float | None] = {}
    for key in ("cpus_per_node", "mem_gb_per_node"):
        v = g.get(key)
        if v is not None and not _positive(v):
            raise where.error(key, f"group {i + 1}: {key} must be a positive number (got {v!r})",
                              "group", i)
        host[key] = float(v) if v is not None else None
    if counts["gpus_per_node"] == 0 and None in host.values():
        raise where.error("gpus_per_node", f"group {i + 1}: a group without GPUs needs "
                          "cpus_per_node and mem_gb_per_node (what its parameter servers use)",
                          "group", i)
    return ClusterGroup(t, counts["nodes"], counts["gpus_per_node"], float(speed), role,
                        host["cpus_per_node"], host["mem_gb_per_node"])


def _speeds(where: _Where, raw: object) -> dict[tuple[str, str], float]:
    if not isinstance(raw, dict):
        raise where.error("speeds", "speeds must be a table of [speeds.APPLICATION] tables")
    out: dict[tuple[str, str], float] = {}
    for app, row in raw.items():
        if not isinstance(row, dict):
            raise where.error(app, f"speeds.{app} must be a table of TYPE = FACTOR", f"speeds.{app}")
        for t, v in row.items():
            if not _positive(v):
                raise where.error(t, f"speeds.{app}.{t} must be a positive number (got {v!r})", f"speeds.{app}")
            out[(str(app), str(t))] = float(v)
    return out


def _positive(v: object) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and v > 0 and math.isfinite(v)


@dataclass(frozen=True, slots=True)
class _Where:
    """Finds the line of a key (tomllib reports lines only for syntax errors)."""

    text: str
    source: str

    def error(self, key: str, message: str, table: str = "", nth: int = 0) -> ClusterFileError:
        """An error at the first line setting ``key`` after the ``nth`` header of ``table``
        (``[table]`` or ``[[table]]``), or anywhere when no table is given."""
        lines = self.text.splitlines()
        start, stop = 0, len(lines)
        if table:
            heads = [n for n, line in enumerate(lines) if line.strip() in (f"[{table}]", f"[[{table}]]")]
            if nth < len(heads):
                start = heads[nth]
                if key == table.rsplit(".", 1)[-1]:
                    return ClusterFileError(f"{self.source}:{start + 1}: {message}")
                stop = next((n for n in range(start + 1, len(lines)) if lines[n].strip().startswith("[")), len(lines))
        pat = re.compile(rf"^\s*(\[+\s*{re.escape(key)}\b|\"?{re.escape(key)}\"?\s*=)")
        for n in range(start, stop):
            if pat.search(lines[n]):
                return ClusterFileError(f"{self.source}:{n + 1}: {message}")
        return ClusterFileError(f"{self.source}: {message}")
