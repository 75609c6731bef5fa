"""The shipped ``tables.bin`` files: generated from the source tables, never stale."""

import dataclasses

import pytest

from stint.perf import tables
from stint.perf.profile import APPLICATIONS


@pytest.mark.parametrize("app", sorted(APPLICATIONS))
def test_the_shipped_tables_are_what_the_generator_writes(app):
    shipped = (tables.profile_dir(app) / "tables.bin").read_bytes()
    assert shipped == tables.build(app), "stale: run .venv/bin/python -m stint.perf.tables"


@pytest.mark.parametrize("app", ["ncf", "yolov3"])
def test_loaded_tables_equal_the_parsed_sources(app):
    src, got = tables.read_sources(app), tables.load(app)
    assert (got.points, got.values) == tables.points_and_values(src.placements, src.scalability)
    assert got.placements == {p: (bs, st, sy) for p, bs, st, sy in src.placements}
    assert got.validation == src.validation
    assert len(got.simplices) == len(got.neighbors) and max(got.simplices) == len(got.points) - 1


def test_a_mesh_of_other_measurements_is_refused(monkeypatch):
    src = tables.read_sources("bert")
    fewer = dataclasses.replace(src, scalability=src.scalability[:-1])
    monkeypatch.setattr(tables, "read_sources", lambda app: fewer)
    with pytest.raises(ValueError, match="profile_meshes.py"):
        tables.build("bert")
