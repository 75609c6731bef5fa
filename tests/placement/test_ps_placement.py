"""Round-robin placement of parameter-server jobs: workers and PSs each checked against every
resource of the node that takes them (GPU, CPU, memory, bandwidth), and PSs kept on the PS group
where the cluster has one."""

from __future__ import annotations

from stint.model.cluster import Cluster, Node
from stint.model.job import JobSpec
from stint.model.resources import Resources
from stint.placement.round_robin import FreeCapacity, fits_empty, ps_hosts

WORKER = Resources(gpu=1, cpu=4, mem_gb=16, net_gbps=10)
PS = Resources(cpu=4, mem_gb=8, net_gbps=10)  # b/B = 1: one PS per worker


def ps_job(workers: int, ps: Resources = PS) -> JobSpec:
    return JobSpec("j", 0.0, 100.0, workers, 1, workers, worker_demand=WORKER, ps_demand=ps)


def split(ps_cap: Resources, ps_nodes: int = 1) -> Cluster:
    """Two worker-only nodes (2 GPUs each, exactly two workers' CPU, memory, bandwidth) and
    ``ps_nodes`` PS-only nodes of ``ps_cap``."""
    w = Node("w", Resources(gpu=2, cpu=8, mem_gb=32, net_gbps=20), "worker")
    return Cluster((w, w) + tuple(Node(f"p{i}", ps_cap, "ps") for i in range(ps_nodes)))


def test_a_ps_group_filled_exactly_to_capacity_fits() -> None:
    cluster = split(Resources(cpu=8, mem_gb=16, net_gbps=20))  # room for exactly two PSs
    alloc = FreeCapacity(cluster).place(ps_job(2), 2)
    assert alloc is not None
    assert alloc.num_workers == 2 and alloc.ps == ((2, 2),)


def test_one_unit_over_any_ps_resource_does_not_fit() -> None:
    for short in (Resources(cpu=7, mem_gb=16, net_gbps=20), Resources(cpu=8, mem_gb=15, net_gbps=20),
                  Resources(cpu=8, mem_gb=16, net_gbps=19)):
        assert not fits_empty(split(short), ps_job(2), 2), short
        assert fits_empty(split(short), ps_job(1), 1), short  # one PS still fits


def test_one_unit_over_a_worker_resource_does_not_fit() -> None:
    cluster = split(Resources(cpu=64, mem_gb=64, net_gbps=100))
    assert fits_empty(cluster, ps_job(4), 4)  # both worker nodes exactly full
    hungry = JobSpec("j", 0.0, 100.0, 4, 1, 4, worker_demand=Resources(gpu=1, cpu=4.5),
                     ps_demand=PS)
    assert not fits_empty(cluster, hungry, 4)
    assert fits_empty(cluster, hungry, 2)


def test_a_ps_never_lands_on_a_worker_node_when_a_ps_group_exists() -> None:
    cluster = split(Resources(cpu=4, mem_gb=8, net_gbps=10))  # one PS only: worker nodes have room
    free = FreeCapacity(cluster)
    assert free.place(ps_job(2), 2) is None  # the second PS would need a worker node
    alloc = free.place(ps_job(1), 1)
    assert alloc is not None and alloc.ps == ((2, 1),)
    assert ps_hosts(cluster) == [2]


def test_without_a_ps_group_pss_share_the_any_nodes_but_never_worker_ones() -> None:
    any_node = Node("a", Resources(gpu=2, cpu=16, mem_gb=64, net_gbps=40))
    worker_only = Node("w", Resources(gpu=2, cpu=16, mem_gb=64, net_gbps=40), "worker")
    cluster = Cluster((worker_only, any_node))
    assert ps_hosts(cluster) == [1]
    alloc = FreeCapacity(cluster).place(ps_job(2), 2)
    assert alloc is not None and alloc.ps == ((1, 2),)
    only_workers = Cluster((worker_only, worker_only))
    assert ps_hosts(only_workers) == []
    assert not fits_empty(only_workers, ps_job(1), 1)
