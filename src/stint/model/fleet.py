"""A fleet: regions containing clusters containing nodes, the links between them, and where each
job's data and checkpoint live. Plain typed data; ``parse_fleet`` reads the TOML text of
``--fleet fleet.toml`` (docs/fleet.md) and names the key (and line) of anything wrong.

```toml
[links]                 # Gbit/s
cluster_gbps = 100.0    # within a cluster
region_gbps = 40.0      # between two clusters of one region
wan_gbps = 10.0         # between regions

[checkpoint]
interval_s = 1800.0     # a running job checkpoints this often (work lost is at most this)
gb_per_gpu = 2.0        # drawn size: gb_per_gpu x GPUs x U[0.5, 1.5] (``draw_sizes``)
data_gb_min = 10.0      # drawn data set size: log-uniform in [data_gb_min, data_gb_max]
data_gb_max = 1000.0
restart_s = 30.0        # a move's restart, as the global scheduler counts it (``move_cost_s``)

[region.east.cluster.e1]
nodes = 64
gpus_per_node = 8
```
"""

from __future__ import annotations

import itertools
import math
import random
import re
import tomllib
from dataclasses import dataclass, replace

from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.model.limits import (
    MAX_CLUSTER_GPUS,
    MAX_FLEET_CLUSTERS,
    MAX_FLEET_FAILURES,
    MAX_FLEET_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    above,
)


class FleetError(ValueError):
    """A fleet description that cannot be used; the message names the source, key and line."""


EXECUTOR_KINDS = "local, http://HOST:PORT (a stint agent executor), ray or ray://HOST:PORT"


@dataclass(frozen=True, slots=True)
class FleetCluster:
    """A cluster of ``nodes`` x ``gpus_per_node``. Live (``stint serve --fleet``) also: its
    executor (``EXECUTOR_KINDS``), its checkpoint storage directory (each job's log and
    checkpoints under ``<storage>/<id>/``; default ``<jobs-dir>/<name>``) and the address of
    its copy service (``HOST:PORT`` of ``stint agent storage``; "": one started by serve on
    127.0.0.1)."""

    name: str
    region: str
    nodes: int
    gpus_per_node: int
    executor: str = "local"
    storage: str = ""
    copy: str = ""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def cluster(self) -> Cluster:
        return Cluster.uniform(self.nodes, self.gpus_per_node)


@dataclass(frozen=True, slots=True)
class Links:
    """Bandwidth in Gbit/s within a cluster, between clusters of a region, between regions."""

    cluster_gbps: float = 100.0
    region_gbps: float = 40.0
    wan_gbps: float = 10.0


@dataclass(frozen=True, slots=True)
class CheckpointRule:
    interval_s: float = 1800.0
    gb_per_gpu: float = 2.0
    data_gb_min: float = 10.0
    data_gb_max: float = 1000.0
    restart_s: float = 30.0


FAILURE_KINDS = ("node", "cluster", "region", "network")


@dataclass(frozen=True, slots=True)
class FleetFailure:
    """``kind`` of ``target`` fails from ``down_s`` to ``up_s``. Targets: a node is
    ``"CLUSTER/INDEX"``, a cluster its name, a region (``region``: every cluster down;
    ``network``: the region cut off, its jobs keep running but nothing moves in or out) its name."""

    kind: str
    target: str
    down_s: float
    up_s: float


@dataclass(frozen=True, slots=True)
class Fleet:
    clusters: tuple[FleetCluster, ...]
    links: Links = Links()
    checkpoint: CheckpointRule = CheckpointRule()
    failures: tuple[FleetFailure, ...] = ()

    def __post_init__(self) -> None:
        """Checks the clusters and each failure (``parse_fleet`` reports a failure's line)."""
        names = [c.name for c in self.clusters]
        if not names:
            raise FleetError("a fleet needs at least one cluster")
        if len(set(names)) != len(names):
            raise FleetError(f"cluster names must be unique across regions (got {names})")
        for f in self.failures:
            self._check(f)

    def _check(self, f: FleetFailure) -> None:
        if f.kind not in FAILURE_KINDS:
            raise FleetError(f"failure kind {f.kind!r}; valid: {', '.join(FAILURE_KINDS)}")
        if not 0 <= f.down_s < f.up_s:
            raise FleetError(f"failure of {f.target!r}: need 0 <= down_s < up_s (got {f.down_s}, {f.up_s})")
        if f.kind in ("region", "network") and f.target not in self.regions:
            raise FleetError(f"failure target {f.target!r} is not a region; regions: {', '.join(self.regions)}")
        if f.kind == "cluster" and f.target not in {c.name for c in self.clusters}:
            raise FleetError(f"failure target {f.target!r} is not a cluster")
        if f.kind == "node":
            name, _, idx = f.target.partition("/")
            ok = name in {c.name for c in self.clusters} and idx.isascii() and idx.isdigit() and len(idx) < 10
            if not ok or int(idx) >= self.clusters[self.index(name)].nodes:
                raise FleetError(f"node failure target {f.target!r} must be CLUSTER/INDEX of an existing node")

    def down_gpu_s(self, t0: float, t1: float) -> list[float]:
        """Per cluster, the GPU-seconds of ``[t0, t1]`` its failures (cluster, region, node)
        took down; overlapping failures count once. A cut network leaves its GPUs up."""
        spans: list[list[tuple[float, float, int]]] = [[] for _ in self.clusters]
        for f in self.failures:
            if f.kind == "node":
                name, _, idx = f.target.partition("/")
                i = self.index(name)
                spans[i].append((f.down_s, f.up_s, int(idx)))
            elif f.kind != "network":
                for i in self.clusters_hit(f):
                    spans[i].append((f.down_s, f.up_s, -1))
        return [_down_s(s, t0, t1, c.nodes) * c.gpus_per_node for s, c in zip(spans, self.clusters, strict=True)]

    def clusters_hit(self, f: FleetFailure) -> list[int]:
        """The clusters a failure takes down or cuts off (none for a node failure)."""
        if f.kind == "cluster":
            return [self.index(f.target)]
        if f.kind in ("region", "network"):
            return [i for i, c in enumerate(self.clusters) if c.region == f.target]
        return []

    @property
    def regions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.region for c in self.clusters))

    @property
    def total_gpus(self) -> int:
        return sum(c.gpus for c in self.clusters)

    def index(self, name: str) -> int:
        for i, c in enumerate(self.clusters):
            if c.name == name:
                return i
        raise KeyError(f"no cluster {name!r}; clusters: {', '.join(c.name for c in self.clusters)}")

    def bandwidth_gbps(self, a: int, b: int) -> float:
        """The link between clusters ``a`` and ``b`` (indices)."""
        if a == b:
            return self.links.cluster_gbps
        if self.clusters[a].region == self.clusters[b].region:
            return self.links.region_gbps
        return self.links.wan_gbps

    def transfer_s(self, gb: float, a: int, b: int) -> float:
        """Seconds to copy ``gb`` gigabytes from cluster ``a`` to ``b``."""
        return gb * 8.0 / self.bandwidth_gbps(a, b)

    @staticmethod
    def single(cluster: Cluster, name: str = "c0") -> Fleet:
        """One cluster of identical nodes (``stint sim`` without ``--fleet``)."""
        gpn = int(cluster.nodes[0].capacity.gpu)
        return Fleet((FleetCluster(name, "r0", cluster.num_nodes, gpn),))


def _down_s(spans: list[tuple[float, float, int]], t0: float, t1: float, nodes: int) -> float:
    """Node-seconds of ``[t0, t1]`` down under ``spans`` ((down, up, node), node -1: all)."""
    cuts = sorted({t0, t1, *(min(max(x, t0), t1) for a, b, _ in spans for x in (a, b))})
    total = 0.0
    for a, b in itertools.pairwise(cuts):
        hit = {n for lo, hi, n in spans if lo <= a and b <= hi}
        total += (b - a) * (nodes if -1 in hit else len(hit))
    return total


@dataclass(frozen=True, slots=True)
class FleetJob:
    """A job of the fleet: its spec, the region of its submitter, the cluster holding its data,
    and the sizes of its checkpoint and data set. ``warmup``: a job already running when the
    measured window opens (a stationary start, ``fleet_workload.generate(warm=True)``): its
    GPU-seconds count in utilization, its attainment does not."""

    spec: JobSpec
    home_region: str
    data_cluster: int
    ckpt_gb: float
    data_gb: float
    warmup: bool = False

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def gpus(self) -> int:
        return self.spec.requested_workers * int(self.spec.worker_demand.gpu)

    @property
    def est_s(self) -> float:
        """Expected run time: the declared duration, else the work (seconds at the requested size)."""
        return self.spec.duration_s if self.spec.duration_s is not None else self.spec.work


def draw_sizes(fleet: Fleet, jobs: list[JobSpec], seed: int) -> list[FleetJob]:
    """The documented seeded rule for what a trace does not say, drawn per job in order:
    home region with probability proportional to its GPUs; data cluster within it likewise;
    checkpoint ``gb_per_gpu x GPUs x U[0.5, 1.5]``; data set log-uniform in
    ``[data_gb_min, data_gb_max]``."""
    rng = random.Random(seed)
    rule = fleet.checkpoint
    regions = fleet.regions
    by_region = {r: [i for i, c in enumerate(fleet.clusters) if c.region == r] for r in regions}
    region_w = [sum(fleet.clusters[i].gpus for i in by_region[r]) for r in regions]
    lo, hi = math.log(rule.data_gb_min), math.log(rule.data_gb_max)
    out = []
    for spec in jobs:
        region = rng.choices(regions, region_w)[0]
        members = by_region[region]
        data = rng.choices(members, [fleet.clusters[i].gpus for i in members])[0]
        gpus = spec.requested_workers * spec.gpus_per_worker
        ckpt = rule.gb_per_gpu * max(gpus, 1) * rng.uniform(0.5, 1.5)
        out.append(FleetJob(spec, region, data, ckpt, math.exp(rng.uniform(lo, hi))))
    return out


# ---------------------------------------------------------------------------------- parsing
_TOP = {"links", "checkpoint", "region", "failure"}
_FAILURE_KEYS = {"kind", "target", "down_s", "up_s"}
_CLUSTER_KEYS = {"nodes", "gpus_per_node"}
_LIVE_KEYS = {"executor", "storage", "copy"}  # optional strings, read by ``stint serve``


def parse_fleet(text: str, source: str) -> Fleet:
    """The fleet described by TOML ``text`` (``source`` names it in errors)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FleetError(f"{source}: {exc}") from None
    where = _Where(text, source)
    for key in data:
        if key not in _TOP:
            raise where.error(key, f"unknown key {key!r}; valid: {', '.join(sorted(_TOP))}")
    links = Links(**_numbers(where, "links", data.get("links", {}), Links()))
    ckpt = CheckpointRule(**_numbers(where, "checkpoint", data.get("checkpoint", {}), CheckpointRule()))
    if ckpt.data_gb_min > ckpt.data_gb_max:
        raise where.error("data_gb_min", "checkpoint.data_gb_min must be <= checkpoint.data_gb_max")
    regions = data.get("region")
    if not isinstance(regions, dict) or not regions:
        raise where.error("region", "a fleet needs at least one [region.NAME.cluster.NAME] table")
    clusters = []
    for rname, rtable in regions.items():
        if not isinstance(rtable, dict) or set(rtable) != {"cluster"} or not isinstance(rtable["cluster"], dict):
            raise where.error(rname, f"region.{rname} must hold only [region.{rname}.cluster.NAME] tables")
        for cname, ctable in rtable["cluster"].items():
            clusters.append(_cluster(where, rname, cname, ctable))
            _check_size(where, clusters)
    try:
        fleet = Fleet(tuple(clusters), links, ckpt)
    except FleetError as exc:
        raise where.error("region", str(exc)) from None
    failures = _failures(where, data.get("failure", []))
    _check_failures(where, fleet, failures)
    return replace(fleet, failures=failures)


def _check_size(where: _Where, clusters: list[FleetCluster]) -> None:
    """The fleet so far within ``stint.model.limits`` (clusters, GPUs); the error names the last
    cluster, the one past a maximum."""
    c = clusters[-1]
    key = f"region.{c.region}.cluster.{c.name}"
    if why := above("the number of clusters", len(clusters), MAX_FLEET_CLUSTERS):
        raise where.error(c.name, f"{key}: {why}", key)
    if why := above("the fleet's GPUs", sum(x.gpus for x in clusters), MAX_FLEET_GPUS):
        raise where.error("nodes", f"{key}: {why}", key)


def _failures(where: _Where, items: object) -> tuple[FleetFailure, ...]:
    if not isinstance(items, list):
        raise where.error("failure", "failure must be an array of tables ([[failure]])")
    if why := above("the number of [[failure]] entries", len(items), MAX_FLEET_FAILURES):
        raise where.error("kind", why, "failure", MAX_FLEET_FAILURES)
    out = []
    for item in items:
        if not isinstance(item, dict) or set(item) != _FAILURE_KEYS:
            got = sorted(item) if isinstance(item, dict) else item
            keys = ", ".join(sorted(_FAILURE_KEYS))
            raise where.error("failure", f"each [[failure]] needs exactly {keys} (got {got})")
        kind, target, down, up = item["kind"], item["target"], item["down_s"], item["up_s"]
        if not isinstance(kind, str) or not isinstance(target, str):
            raise where.error("kind", "failure.kind and failure.target must be strings")
        for k, v in (("down_s", down), ("up_s", up)):
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise where.error(k, f"failure.{k} must be a number (got {v!r})")
        out.append(FleetFailure(kind, target, float(down), float(up)))
    return tuple(out)


def _check_failures(where: _Where, fleet: Fleet, failures: tuple[FleetFailure, ...]) -> None:
    for n, f in enumerate(failures):
        try:
            fleet._check(f)
        except FleetError as exc:
            key = "kind" if "kind" in str(exc) else "down_s" if "down_s" in str(exc) else "target"
            raise where.error(key, f"failure {n + 1}: {exc}", "failure", n) from None


def _cluster(where: _Where, region: str, name: str, table: object) -> FleetCluster:
    key = f"region.{region}.cluster.{name}"
    if not isinstance(table, dict):
        raise where.error(name, f"{key} must be a table")
    for k in table:
        if k not in _CLUSTER_KEYS | _LIVE_KEYS:
            valid = ", ".join(sorted(_CLUSTER_KEYS | _LIVE_KEYS))
            raise where.error(k, f"unknown key {key}.{k}; valid: {valid}", key)
    vals = {}
    for k in sorted(_CLUSTER_KEYS):
        v = table.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise where.error(k if k in table else name, f"{key}.{k} must be a positive integer (got {v!r})", key)
        vals[k] = v
    for k, maximum in (("gpus_per_node", MAX_GPUS_PER_NODE), ("nodes", MAX_NODES)):
        if why := above(f"{key}.{k}", vals[k], maximum):
            raise where.error(k, why, key)
    if why := above(f"{key}.nodes x gpus_per_node", vals["nodes"] * vals["gpus_per_node"], MAX_CLUSTER_GPUS):
        raise where.error("nodes", why, key)
    live = {}
    for k in sorted(_LIVE_KEYS & set(table)):
        v = table[k]
        if not isinstance(v, str) or not v:
            raise where.error(k, f"{key}.{k} must be a non-empty string (got {v!r})", key)
        live[k] = v
    executor = live.get("executor", "local")
    if not (executor in ("local", "ray") or executor.startswith(("http://", "ray://"))):
        raise where.error("executor", f"{key}.executor {executor!r}; valid: {EXECUTOR_KINDS}", key)
    copy = live.get("copy", "")
    if copy and not _host_port(copy):
        raise where.error("copy", f"{key}.copy must be HOST:PORT (got {copy!r})", key)
    return FleetCluster(name, region, vals["nodes"], vals["gpus_per_node"], executor,
                        live.get("storage", ""), copy)


def _host_port(text: str) -> bool:
    host, sep, port = text.rpartition(":")
    return bool(host) and bool(sep) and port.isdigit() and 0 < int(port) < 65536


def _numbers(where: _Where, section: str, table: object, defaults: object) -> dict[str, float]:
    if not isinstance(table, dict):
        raise where.error(section, f"{section} must be a table ([{section}])")
    allowed = set(type(defaults).__dataclass_fields__)  # type: ignore[attr-defined]
    out = {}
    for k, v in table.items():
        if k not in allowed:
            raise where.error(k, f"unknown key {section}.{k}; valid: {', '.join(sorted(allowed))}", section)
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or not math.isfinite(v):
            raise where.error(k, f"{section}.{k} must be a positive number (got {v!r})", section)
        out[k] = float(v)
    return out


@dataclass(frozen=True, slots=True)
class _Where:
    """Finds the line of a key in the source text (tomllib reports lines only for syntax)."""

    text: str
    source: str

    def error(self, key: str, message: str, table: str = "", nth: int = 0) -> FleetError:
        """An error at the line of ``key``: the first after the ``nth`` header of ``table``
        (``[table]`` or ``[[table]]``) when given, else the first anywhere."""
        lines = self.text.splitlines()
        start = 0
        if table:
            heads = [n for n, line in enumerate(lines) if line.strip() in (f"[{table}]", f"[[{table}]]")]
            if nth < len(heads):
                start = heads[nth]
        pat = re.compile(rf"^\s*(\[.*\b{re.escape(key)}\b.*\]|\"?{re.escape(key)}\"?\s*=)")
        for n in range(start, len(lines)):
            if pat.search(lines[n]):
                return FleetError(f"{self.source}:{n + 1}: {message}")
        return FleetError(f"{self.source}: {message}")
