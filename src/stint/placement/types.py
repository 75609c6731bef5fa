"""Accelerator types in placement: a job runs on one type at a time, and only on types it allows.

On a typed cluster (``Cluster.typed``) an allocation's *type* is the type of its nodes; an
allocation whose nodes mix types, or whose type the job does not allow (``JobSpec.gpu_types``),
is refused by the ledger (``type_refusal``: resource "type"). Placement on one type is placement
on a free list in which every other type's nodes show nothing free (``masked``); ``place_typed``
tries the job's current type first (a resize stays on its type), then the other types it
allows, most free GPUs first. An untyped cluster never reaches this module's checks.
"""

from __future__ import annotations

from collections.abc import Sequence

from stint.model.allocation import Allocation
from stint.model.cluster import Cluster
from stint.model.job import JobSpec

MIXED = "*mixed*"  # ``alloc_type`` of an allocation whose nodes are of more than one type


def alloc_type(cluster: Cluster, alloc: Allocation) -> str:
    """The type of ``alloc``'s worker nodes: "" if it is empty or the cluster untyped, ``MIXED``
    if they are of several types."""
    if not alloc or not cluster.typed:
        return ""
    nodes = cluster.nodes
    first = nodes[alloc.workers[0][0]].gpu_type
    for node, _ in alloc.workers[1:]:
        if nodes[node].gpu_type != first:
            return MIXED
    return first


def type_problem(cluster: Cluster, spec: JobSpec, alloc: Allocation) -> str:
    """Why ``alloc`` breaks the type rules for ``spec`` ("" if it does not)."""
    t = alloc_type(cluster, alloc)
    if t == MIXED:
        kinds = sorted({cluster.type_of(n) for n, _ in alloc.workers})
        return f"its workers span accelerator types {', '.join(kinds)} (a job runs on one type at a time)"
    if t and not spec.allows_type(t):
        return f"type {t} is not one it may run on ({', '.join(spec.gpu_types)})"
    return ""


def masked(free: Sequence[int], cluster: Cluster, gpu_type: str) -> list[int]:
    """``free`` with every node not of ``gpu_type`` showing 0 free GPUs (a copy of ``free`` on
    an untyped cluster)."""
    if not cluster.typed:
        return list(free)
    out = [0] * len(free)
    for i in cluster.nodes_of(gpu_type):
        out[i] = free[i]
    return out


def allowed_types(cluster: Cluster, spec: JobSpec) -> list[str]:
    """The cluster's types the job may run on, in cluster order."""
    return [t for t in cluster.types if spec.allows_type(t)]


def type_order(cluster: Cluster, spec: JobSpec, free: Sequence[int], current: str = "") -> list[str]:
    """The types to try for ``spec``: its ``current`` type first, then the others it allows by
    free GPUs, most first (ties: cluster order)."""
    rest = [t for t in allowed_types(cluster, spec) if t != current]
    rest.sort(key=lambda t: -sum(free[i] for i in cluster.nodes_of(t)))
    return ([current] if current and spec.allows_type(current) else []) + rest


def packed_on(cluster: Cluster, gpu_type: str, workers: int, gpus_per_worker: int = 1) -> Allocation:
    """``workers`` packed on the fewest nodes of ``gpu_type`` (every node taken as empty, in index
    order; what a job alone on that type would get; any node on an untyped cluster). EMPTY if
    the type cannot hold them."""
    out: dict[int, int] = {}
    left = workers
    for i in cluster.nodes_of(gpu_type) if cluster.typed else range(cluster.num_nodes):
        if not left:
            break
        k = min(left, int(cluster.nodes[i].capacity.gpu) // max(gpus_per_worker, 1))
        if k > 0:
            out[i] = k
            left -= k
    return Allocation.of(out) if not left else Allocation()
