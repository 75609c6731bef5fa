"""The shipped ``tables.json.gz`` files: generated from the source tables, never stale."""

import dataclasses
import gzip

import pytest

from stint.perf import tables
from stint.perf.profile import APPLICATIONS


@pytest.mark.parametrize("app", sorted(APPLICATIONS))
def test_the_shipped_tables_are_what_the_generator_writes(app):
    shipped = gzip.decompress((tables.profile_dir(app) / "tables.json.gz").read_bytes()).decode()
    assert shipped == tables.build(app), "stale: run .venv/bin/python -m stint.perf.tables"


def test_loaded_tables_equal_the_parsed_sources():
    src, got = tables.read_sources("yolov3"), tables.load("yolov3")
    assert got.points == src.points and got.values == src.values
    assert got.placements == {p: (bs, st, sy) for p, bs, st, sy in src.placements}
    assert got.validation == src.validation


def test_a_mesh_of_other_measurements_is_refused(monkeypatch):
    src = tables.read_sources("bert")
    fewer = dataclasses.replace(src, points=src.points[:-1], values=src.values[:-1])
    monkeypatch.setattr(tables, "read_sources", lambda app: fewer)
    with pytest.raises(ValueError, match="profile_meshes.py"):
        tables.build("bert")
