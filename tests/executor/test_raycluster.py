"""The test Ray cluster is real, multi-node, and reachable on loopback only."""

from __future__ import annotations

import os
import socket

import pytest

from stint.runtime.executor.raycluster import LoopbackRayCluster

LISTEN = "0A"


def _listening_addresses(pids: list[int]) -> set[str]:
    """Local addresses of the TCP sockets in LISTEN state held by ``pids``."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue  # exited meanwhile
    out = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] != LISTEN or cols[9] not in inodes:
                    continue
                raw = bytes.fromhex(cols[1].split(":")[0])
                # /proc prints each 32-bit word in host (little-endian) order
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                addr = socket.inet_ntop(family, words)
                out.add(addr.removeprefix("::ffff:"))
    return out


@pytest.mark.slow
@pytest.mark.ray
def test_two_nodes_with_stint_resources_listening_on_loopback_only(
    ray_cluster: LoopbackRayCluster,
):
    import ray

    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert sorted(k for n in nodes for k in n["Resources"] if k.startswith("stint_node_")) == [
        "stint_node_node-0",
        "stint_node_node-1",
    ]
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    pids = ray_cluster.pids()
    assert len(pids) >= 4  # GCS, two raylets, their agents and workers
    addresses = _listening_addresses([*pids, os.getpid()])  # and this driver's own servers
    assert addresses and addresses <= {"127.0.0.1"}, addresses
