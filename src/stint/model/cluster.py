"""Nodes and clusters."""

from __future__ import annotations

from dataclasses import dataclass

from stint.model.resources import Resources


@dataclass(frozen=True, slots=True)
class Node:
    """A machine. ``role`` is "worker" (hosts workers) or "ps" (hosts parameter servers) or "any"."""

    name: str
    capacity: Resources
    role: str = "any"


@dataclass(frozen=True, slots=True)
class Cluster:
    """An ordered set of nodes. Allocations refer to nodes by their index in ``nodes``."""

    nodes: tuple[Node, ...]

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
    def total_gpus(self) -> int:
        return int(sum(n.capacity.gpu for n in self.nodes))

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
