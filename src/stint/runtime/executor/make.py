"""The executor a setting names: ``local`` (virtual nodes on this machine), ``ray`` or
``ray://HOST:PORT`` (a Ray cluster), ``http://HOST:PORT`` (a fleet cluster's agent). Each kind's
module is imported only when named (Ray and the HTTP client are not small)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stint.ports import PortRange
from stint.runtime.executor.base import Executor, NodeInfo

KINDS = "local, ray, ray://HOST:PORT, http://HOST:PORT"


def make_executor(kind: str, state_dir: Path, nodes: int, gpus_per_node: int,
                  ray_address: str | None = None, secret: str = "", name: str = "",
                  network: str = "host", node_list: Sequence[NodeInfo] = (),
                  ports: PortRange | None = None) -> Executor:
    """The executor ``kind`` names, keeping its durable state in ``state_dir``. ``nodes`` x
    ``gpus_per_node``: a local executor's virtual nodes, and the nodes an agent must have;
    ``ray_address``: the cluster of ``ray`` (None: $RAY_ADDRESS); ``secret``: the fleet's, which
    an agent asks for; ``name``: the cluster's, in an agent's errors; ``network``: a local
    executor's ("host", or "private": a network namespace per attempt); ``node_list``: a local
    executor's named, typed virtual nodes (``stint serve --cluster``) instead of nodes x GPUs;
    ``ports``: a local executor's rendezvous ports (``[executor] ports``; None: any free one)."""
    if kind == "local":
        from stint.runtime.executor.local import LocalExecutor

        return LocalExecutor(state_dir, nodes=nodes, gpus_per_node=gpus_per_node,
                             network=network, node_list=node_list, ports=ports)
    if kind == "ray" or kind.startswith("ray://"):
        from stint.runtime.executor.ray import RayExecutor

        return RayExecutor(state_dir, address=ray_address if kind == "ray" else kind)
    if kind.startswith("http://"):
        from stint.runtime.executor.remote import RemoteExecutor

        return RemoteExecutor(kind, [NodeInfo(f"node-{i}", gpus_per_node) for i in range(nodes)],
                              secret, name)
    raise ValueError(f"unknown executor {kind!r}; valid: {KINDS}")
