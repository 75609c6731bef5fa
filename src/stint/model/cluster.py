"""Nodes and clusters."""

from __future__ import annotations

from dataclasses import dataclass, field

from stint.model.resources import Resources


@dataclass(frozen=True, slots=True)
class Node:
    """A machine. ``role`` is "worker" (hosts workers) or "ps" (hosts parameter servers) or "any".
    ``gpu_type`` names its accelerators (``a100``, ``v100``, any name); "" is an untyped node."""

    name: str
    capacity: Resources
    role: str = "any"
    gpu_type: str = ""


@dataclass(frozen=True, slots=True)
class Cluster:
    """An ordered set of nodes. Allocations refer to nodes by their index in ``nodes``.

    A cluster is *typed* when its nodes name their accelerator type (every node then does): a job
    runs on one type at a time (``placement.types``). ``types`` are the types in node order;
    ``nodes_of(t)`` the indices of type ``t``'s nodes, ascending. ``total`` (every node's
    capacity summed) and ``total_gpus`` are computed once, with the cluster."""

    nodes: tuple[Node, ...]
    total: Resources = field(init=False, repr=False, compare=False)
    total_gpus: int = field(init=False, repr=False, compare=False)
    types: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _of_type: dict[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        named = [n.gpu_type for n in self.nodes]
        if any(named) and not all(named):
            blank = next(n.name for n in self.nodes if not n.gpu_type)
            raise ValueError(f"node {blank!r} has no gpu_type: in a typed cluster every node names its type")
        of: dict[str, list[int]] = {}
        for i, t in enumerate(named):
            if t:
                of.setdefault(t, []).append(i)
        object.__setattr__(self, "types", tuple(of))
        object.__setattr__(self, "_of_type", {t: tuple(v) for t, v in of.items()})
        total = Resources()
        for n in self.nodes:
            total = total + n.capacity
        object.__setattr__(self, "total", total)
        object.__setattr__(self, "total_gpus", int(total.gpu))

    @property
    def typed(self) -> bool:
        return bool(self.types)

    def nodes_of(self, gpu_type: str) -> tuple[int, ...]:
        """Indices of the nodes of ``gpu_type`` (empty for a type the cluster lacks)."""
        return self._of_type.get(gpu_type, ())

    def type_of(self, node: int) -> str:
        return self.nodes[node].gpu_type

    def gpus_of(self, gpu_type: str) -> int:
        return int(sum(self.nodes[i].capacity.gpu for i in self.nodes_of(gpu_type)))

    @staticmethod
    def uniform(
        num_nodes: int,
        gpus_per_node: int,
        cpu_per_gpu: float = 8.0,
        mem_gb_per_gpu: float = 64.0,
        net_gbps: float = 100.0,
    ) -> Cluster:
        """``num_nodes`` identical GPU nodes named node-0, node-1, ..."""
        if num_nodes <= 0 or gpus_per_node <= 0:
            raise ValueError(
                f"a cluster needs at least one node and one GPU per node "
                f"(got nodes={num_nodes}, gpus_per_node={gpus_per_node})"
            )
        cap = Resources(
            gpu=gpus_per_node,
            cpu=cpu_per_gpu * gpus_per_node,
            mem_gb=mem_gb_per_gpu * gpus_per_node,
            net_gbps=net_gbps,
        )
        return Cluster(tuple(Node(f"node-{i}", cap) for i in range(num_nodes)))

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def gpu_capacities(self) -> list[int]:
        return [int(n.capacity.gpu) for n in self.nodes]

    def index_of(self, name: str) -> int:
        for i, n in enumerate(self.nodes):
            if n.name == name:
                return i
        raise KeyError(f"no node named {name!r}; nodes are {[n.name for n in self.nodes]}")
