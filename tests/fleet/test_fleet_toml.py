"""``--fleet fleet.toml``: a good file, and errors that name the key and its line."""

from __future__ import annotations

import pytest

from stint.model.fleet import FleetError, parse_fleet

GOOD = """\
[links]
cluster_gbps = 100
region_gbps = 40
wan_gbps = 10

[checkpoint]
interval_s = 900

[region.east.cluster.e1]
nodes = 4
gpus_per_node = 8

[region.east.cluster.e2]
nodes = 2
gpus_per_node = 4

[region.west.cluster.w1]
nodes = 1
gpus_per_node = 8

[[failure]]
kind = "region"
target = "west"
down_s = 10
up_s = 20
"""


def test_a_good_file() -> None:
    fl = parse_fleet(GOOD, "f.toml")
    assert [(c.name, c.region, c.gpus) for c in fl.clusters] == [("e1", "east", 32), ("e2", "east", 8),
                                                                  ("w1", "west", 8)]
    assert fl.checkpoint.interval_s == 900.0 and fl.checkpoint.restart_s == 30.0
    assert fl.bandwidth_gbps(0, 1) == 40.0 and fl.bandwidth_gbps(0, 2) == 10.0
    assert fl.transfer_s(10.0, 0, 2) == 8.0
    assert fl.clusters_hit(fl.failures[0]) == [2]
    assert (fl.clusters[0].executor, fl.clusters[0].storage, fl.clusters[0].copy) == ("local", "", "")


def test_live_keys() -> None:
    text = GOOD.replace("gpus_per_node = 4", 'gpus_per_node = 4\nexecutor = "http://10.0.0.2:7100"'
                        '\nstorage = "/srv/e2"\ncopy = "10.0.0.2:7101"', 1)
    e2 = parse_fleet(text, "f.toml").clusters[1]
    assert (e2.executor, e2.storage, e2.copy) == ("http://10.0.0.2:7100", "/srv/e2", "10.0.0.2:7101")


@pytest.mark.parametrize(("old", "new", "message"), [
    ("wan_gbps = 10", "wan_gbs = 10", "f.toml:4: unknown key links.wan_gbs"),
    ("interval_s = 900", "interval_s = -1", "f.toml:7: checkpoint.interval_s must be a positive number"),
    ("nodes = 2", "nodes = 2.5", "f.toml:14: region.east.cluster.e2.nodes must be a positive integer"),
    ("gpus_per_node = 4", "gpus = 4", "f.toml:15: unknown key region.east.cluster.e2.gpus"),
    ('target = "west"', 'target = "north"', "f.toml:23: failure 1: failure target 'north' is not a region"),
    ('kind = "region"', 'kind = "meteor"', "failure kind 'meteor'"),
    ("[links]", "[link]", "f.toml:1: unknown key 'link'"),
    ("nodes = 4", "nodes = 4\nnodes = 5", "line 11"),  # TOML syntax: tomllib's own line
    ("gpus_per_node = 4", 'gpus_per_node = 4\nexecutor = "k8s"',
     "f.toml:16: region.east.cluster.e2.executor 'k8s'; valid: local, http://"),
    ("gpus_per_node = 4", 'gpus_per_node = 4\ncopy = "10.0.0.1"',
     "f.toml:16: region.east.cluster.e2.copy must be HOST:PORT"),
    ("gpus_per_node = 4", "gpus_per_node = 4\nstorage = 3",
     "f.toml:16: region.east.cluster.e2.storage must be a non-empty string"),
])
def test_errors_name_the_key_and_line(old: str, new: str, message: str) -> None:
    with pytest.raises(FleetError) as exc:
        parse_fleet(GOOD.replace(old, new, 1), "f.toml")
    assert message in str(exc.value)


def test_a_fleet_needs_a_cluster() -> None:
    with pytest.raises(FleetError, match="at least one"):
        parse_fleet("[links]\nwan_gbps = 1\n", "f.toml")
