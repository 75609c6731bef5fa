"""The cluster file: node groups by type, speeds, the throughput file; errors name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typed_helpers import TWO_TYPES  # type: ignore[import-not-found]

from stint.model import Allocation, Cluster, JobSpec, Node, Resources
from stint.model.cluster_file import ClusterFileError, parse_cluster
from stint.placement.ledger import Ledger, RefusalCode
from stint.sim.cluster_input import read_cluster


def test_groups_become_typed_nodes_named_per_type() -> None:
    cf = parse_cluster(TWO_TYPES + '\n[[group]]\ngpu_type = "v100"\nnodes = 1\ngpus_per_node = 2\n', "c.toml")
    c = cf.cluster()
    assert [n.name for n in c.nodes] == ["v100-0", "v100-1", "k80-0", "k80-1", "v100-2"]
    assert c.types == ("v100", "k80")
    assert c.nodes_of("v100") == (0, 1, 4) and c.gpus_of("v100") == 10 and c.gpus_of("k80") == 8
    assert cf.type_speeds == {"v100": 1.0, "k80": 0.5}
    assert cf.throughputs == "tput.json"
    assert not Cluster.uniform(2, 4).typed


@pytest.mark.parametrize(("text", "where", "what"), [
    ('[[group]]\ngpu_type = "a"\nnodes = 0\ngpus_per_node = 4\n', "c.toml:3:", "nodes must be a whole number >= 1"),
    (('[[group]]\ngpu_type = "a"\nnodes = 1\ngpus_per_node = 4\n\n[[group]]\ngpu_type = "b"\nnodes = 1\n'
      'gpus = 4\n'), "c.toml:9:", "group 2: unknown key 'gpus'"),
    ('[[group]]\ngpu_type = "a"\nnodes = 1\ngpus_per_node = 4\n[[group]]\nnodes = 1\ngpus_per_node = 4\n',
     "c.toml:5:", "group 2: missing 'gpu_type'"),
    ('[[group]]\nnodes = 1\ngpus_per_node = 0\n', "c.toml:3:", "gpus_per_node must be a whole number >= 1"),
    ('[[group]]\nnodes = 1\ngpus_per_node = 0\nrole = "ps"\ncpus_per_node = 4\n', "c.toml:3:",
     "needs cpus_per_node and mem_gb_per_node"),
    ('[[group]]\ngpu_type = "a b"\nnodes = 1\ngpus_per_node = 4\n', "c.toml:2:", "gpu_type must be a name"),
    ('[[group]]\ngpu_type = "a"\nnodes = 1\ngpus_per_node = 4\nspeed = -1\n', "c.toml:5:", "speed must be a positive"),
    ('nodes = 3\n[[group]]\ngpu_type = "a"\nnodes = 1\ngpus_per_node = 4\n', "c.toml:1:", "unknown key 'nodes'"),
    ('[[group]]\ngpu_type = "a"\nnodes = 1\ngpus_per_node = 4\n[speeds.cifar10]\na = "fast"\n', "c.toml:6:",
     "speeds.cifar10.a must be a positive number"),
    ('[[group]]\ngpu_type = "a"\nnodes = 1\ngpus_per_node = 2000\n', "c.toml:4:", "above the maximum"),
    ("throughputs = 3\n", "c.toml", "at least one [[group]]"),
    ("[[group]\n", "c.toml", "not valid TOML"),
])
def test_bad_cluster_files_name_the_file_line_and_field(text: str, where: str, what: str) -> None:
    with pytest.raises(ClusterFileError) as err:
        parse_cluster(text, "c.toml")
    assert str(err.value).startswith(where) and what in str(err.value)


def test_a_missing_throughput_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "types.toml").write_text(TWO_TYPES)
    with pytest.raises(ClusterFileError, match=r"types.toml: throughputs: .*tput.json: cannot read"):
        read_cluster(tmp_path / "types.toml")


def test_a_cluster_is_typed_on_every_node_or_none() -> None:
    with pytest.raises(ValueError, match="node 'n1' has no gpu_type"):
        Cluster((Node("n0", Resources(gpu=1), gpu_type="a"), Node("n1", Resources(gpu=1))))


def test_the_ledger_refuses_mixed_and_disallowed_types() -> None:
    c = Cluster((Node("a0", Resources(gpu=2), gpu_type="a"), Node("b0", Resources(gpu=2), gpu_type="b")))
    led = Ledger(c)
    only_a = JobSpec("j", 0.0, 1.0, 2, 2, 2, gpu_types=("a",))
    mixed = led.shortfall(only_a, Allocation.of({0: 1, 1: 1}))
    assert mixed is not None and mixed.code == RefusalCode.TYPE and "span accelerator types a, b" in str(mixed)
    wrong = led.shortfall(only_a, Allocation.of({1: 2}))
    assert wrong is not None and wrong.code == RefusalCode.TYPE and "type b is not one it may run on (a)" in str(wrong)
    assert led.shortfall(only_a, Allocation.of({0: 2})) is None
    led.take(only_a, Allocation.of({0: 2}))
    assert led.used_by_type == {"a": 2, "b": 0}
    any_type = JobSpec("k", 0.0, 1.0, 2, 2, 2)
    assert led.shortfall(any_type, Allocation.of({1: 2})) is None


def test_a_group_role_makes_a_ps_host_group() -> None:
    text = ('[[group]]\ngpu_type = "a"\nnodes = 2\ngpus_per_node = 2\nrole = "worker"\n'
            '[[group]]\ngpu_type = "cpu"\nnodes = 1\ngpus_per_node = 1\nrole = "ps"\n')
    cluster = parse_cluster(text, "c.toml").cluster()
    assert [n.role for n in cluster.nodes] == ["worker", "worker", "ps"]
    assert parse_cluster(text.replace('role = "worker"\n', ''), "c.toml").cluster().nodes[0].role == "any"
    with pytest.raises(ClusterFileError, match=r"^c.toml:5: group 1: role must be one of any, worker, ps"):
        parse_cluster(text.replace('"worker"', '"server"'), "c.toml")


def test_an_untyped_cluster_file_with_cpu_only_ps_hosts() -> None:
    text = ('[[group]]\nnodes = 2\ngpus_per_node = 2\n'
            '[[group]]\nnodes = 1\ngpus_per_node = 0\nrole = "ps"\ncpus_per_node = 4\nmem_gb_per_node = 8\n')
    cluster = parse_cluster(text, "c.toml").cluster()
    assert [n.name for n in cluster.nodes] == ["node-0", "node-1", "node-2"]
    assert not cluster.typed
    assert [n.role for n in cluster.nodes] == ["any", "any", "ps"]
    assert cluster.nodes[2].capacity.as_tuple()[:3] == (0, 4.0, 8.0)
    assert cluster.nodes[0].capacity.cpu == 16.0  # the default: 8 cores per GPU
