"""The largest inputs the simulator takes (docs/simulator.md, "Input limits").

Every size the simulator builds something from -- nodes, GPUs, one job's GPUs, the rows of a
trace -- has a maximum here, so an absurd value (a typo, a job of 10^20 GPUs, a ten-million-row
file) is refused at once with its file and line, or the flag it came from, instead of filling
memory or running for hours. Each maximum is well above any real use: the largest runs in
benchmarks/ are a million jobs on 100,000 GPUs (``sim_million.py``: 12,500 nodes of 8;
``fleet_scale.py``: 30 clusters of 416 nodes of 8) and the shipped Philly log has 82,247 jobs.
What the largest cost, measured: a trace takes about 0.8 GB per million rows to load (so 1.6 GB
at ``MAX_TRACE_JOBS``, before the simulation's own state); a three-job run on the largest
cluster (200,000 nodes x 5 GPUs) 2 s and 0.1 GB.

The readers check: ``stint.sim.cli``, ``SweepConfig.check`` and ``SimConfig.cluster`` (flags),
``stint.sim.traces`` (trace rows, ``philly-shaped:N[:GPUS]``),
``stint.model.fleet`` (fleet files).
"""

from __future__ import annotations

MAX_GPUS_PER_NODE = 1_024
"""GPUs of one node (``--gpus-per-node``, a fleet cluster's ``gpus_per_node``)."""

MAX_NODES = 200_000
"""Nodes of one cluster (``--nodes``, a fleet cluster's ``nodes``)."""

MAX_CLUSTER_GPUS = 1_000_000
"""GPUs of one cluster (``--gpus``, nodes x GPUs per node, ``philly-shaped:N:GPUS``,
``stint sweep --gpus``)."""

MAX_FLEET_GPUS = 1_000_000
"""GPUs of all a fleet's clusters together."""

MAX_FLEET_CLUSTERS = 1_000
"""Clusters of one fleet."""

MAX_FLEET_FAILURES = 10_000
"""``[[failure]]`` entries of one fleet file."""

MAX_JOB_GPUS = 1_000_000
"""GPUs one job asks for (Philly's ``num_gpus``, Pollux's ``num_replicas``): no cluster is larger."""

MAX_BATCH_SIZE = 1_000_000
"""A Pollux-format job's global batch size (``batch_size``, samples); a job's largest size is
derived from it (batch / the application's smallest local batch)."""

MAX_TRACE_JOBS = 2_000_000
"""Rows of a trace read whole (without ``--limit``), jobs kept (``--limit N``), jobs generated
(``philly-shaped:N``, ``--fleet-jobs N``)."""


def above(what: str, value: int, maximum: int) -> str | None:
    """The reason ``value`` is refused (``what`` names it), or None when it is within ``maximum``."""
    if value <= maximum:
        return None
    return f"{what} is {value:,}, above the maximum of {maximum:,} (docs/simulator.md, \"Input limits\")"


def cluster_reason(nodes: int, gpus_per_node: int, nodes_name: str, per_node_name: str) -> str | None:
    """Why a cluster of ``nodes`` x ``gpus_per_node`` is refused (names as given), or None."""
    return (above(per_node_name, gpus_per_node, MAX_GPUS_PER_NODE) or above(nodes_name, nodes, MAX_NODES)
            or above(f"{nodes_name} x {per_node_name} ({nodes:,} x {gpus_per_node:,} GPUs)",
                     nodes * gpus_per_node, MAX_CLUSTER_GPUS))
