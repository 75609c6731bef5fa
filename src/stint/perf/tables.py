"""Pollux's profile tables in the form a simulation reads: one ``tables.json.gz`` per application.

The sources, in ``data/pollux/profiles/<app>/``, are the measured tables (``placements.csv.gz``,
``scalability.csv.gz``, ``validation-<B>.csv.gz``) and the Delaunay mesh over their points
(``mesh.json.gz``, SciPy's Qhull, ``scripts/profile_meshes.py``). Parsing the CSVs and the mesh
took ~50 ms of every Pollux run; ``build`` does it once, into one JSON document per application
(``Tables``: the step-time tables with rotations of a placement averaged, the interpolation
points, the mesh, the validation tables), and ``load`` reads that back in one ``json.loads``.
Floats go through ``repr`` both ways, so every lookup gives the same value as from the CSVs.

The shipped files are generated, never edited: ``python -m stint.perf.tables`` (or
``scripts/profile_meshes.py``, which also recomputes the meshes) rewrites them from the sources,
and ``tests/sim/test_profile_tables.py`` checks that each equals what ``build`` produces.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from stint import data_path

Vec = tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class Sources:
    """What the measured tables say, parsed (the mesh's input)."""

    # (placement, local batches ascending, step s, sync s), in table order.
    placements: list[tuple[tuple[int, ...], list[float], list[float], list[float]]]
    points: list[Vec]  # (nodes, replicas, local batch) of every measurement
    values: list[tuple[float, float]]  # (step s, sync s) at each point
    # (global batch, progress, grad_sqr, grad_var per epoch), batch ascending.
    validation: list[tuple[float, list[float], list[float], list[float]]]


def profile_dir(app: str) -> Path:
    return data_path(f"pollux/profiles/{app}")


def points_digest(points: list[Vec]) -> str:
    """Identifies the measurement points a mesh was computed from."""
    return f"crc32:{zlib.crc32(repr(points).encode()):08x}"


def read_sources(app: str) -> Sources:
    """Parse ``app``'s measured tables (several rotations of one placement, e.g. "12" and "21",
    averaged per local batch; placements as GPUs per node, largest first)."""
    from stint.perf.profile import canonical

    base = profile_dir(app)
    rows: dict[tuple[int, ...], dict[float, list[tuple[float, float]]]] = {}
    for placement, bsz, step_s, sync_s in _csv(base / "placements.csv.gz"):
        key = canonical(tuple(int(c) for c in placement))
        rows.setdefault(key, {}).setdefault(float(bsz), []).append((float(step_s), float(sync_s)))
    placements, points, values = [], [], []
    for key, by_bsz in rows.items():
        bs = sorted(by_bsz)
        step = [sum(v[0] for v in by_bsz[b]) / len(by_bsz[b]) for b in bs]
        sync = [sum(v[1] for v in by_bsz[b]) / len(by_bsz[b]) for b in bs]
        placements.append((key, bs, step, sync))
        for b, st, sy in zip(bs, step, sync):
            points.append((float(len(key)), float(sum(key)), b))
            values.append((st, sy))
    for nodes, replicas, bsz, step_s, sync_s in _csv(base / "scalability.csv.gz"):
        points.append((float(nodes), float(replicas), float(bsz)))
        values.append((float(step_s), float(sync_s)))
    return Sources(placements, points, values, _validation(base))


def build(app: str) -> str:
    """The text of ``app``'s ``tables.json.gz``: its sources and its mesh (refused if the mesh
    was computed from other points than the tables')."""
    src = read_sources(app)
    path = profile_dir(app) / "mesh.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        mesh = json.load(fh)
    if mesh["digest"] != points_digest(src.points):
        raise ValueError(f"{path}: computed from other measurements than {app}'s tables; "
                         "run scripts/profile_meshes.py")
    doc = {"placements": src.placements, "points": src.points, "values": src.values,
           "simplices": mesh["simplices"], "neighbors": mesh["neighbors"], "validation": src.validation}
    return json.dumps(doc, separators=(",", ":"))


def write(app: str) -> Path:
    """Rewrite ``app``'s shipped ``tables.json.gz`` from its sources."""
    path = profile_dir(app) / "tables.json.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as fh:
        fh.write(build(app).encode())
    return path


@cache
def load(app: str) -> Tables:
    """``app``'s shipped tables (one gzip read and one ``json.loads``, once per process)."""
    with gzip.open(profile_dir(app) / "tables.json.gz", "rb") as fh:
        doc = json.loads(fh.read())
    return Tables(
        placements={tuple(p): (bs, step, sync) for p, bs, step, sync in doc["placements"]},
        points=[(p[0], p[1], p[2]) for p in doc["points"]],
        values=[(v[0], v[1]) for v in doc["values"]],
        simplices=doc["simplices"],
        neighbors=doc["neighbors"],
        validation=[(b, prog, sqr, var) for b, prog, sqr, var in doc["validation"]],
    )


@dataclass(frozen=True, slots=True)
class Tables:
    """One application's shipped tables, as ``stint.perf.profile`` and ``stint.perf.progress`` use them."""

    placements: dict[tuple[int, ...], tuple[list[float], list[float], list[float]]]  # placement -> (batches, step, sync)
    points: list[Vec]
    values: list[tuple[float, float]]
    simplices: list[int]  # four vertex indices per tetrahedron, flat
    neighbors: list[int]  # four neighbouring tetrahedra (-1: none) per tetrahedron, flat
    validation: list[tuple[float, list[float], list[float], list[float]]]  # as ``Sources.validation``


def _validation(base: Path) -> list[tuple[float, list[float], list[float], list[float]]]:
    out = []
    for f in sorted(base.glob("validation-*.csv.gz"), key=lambda p: int(p.name.split("-")[1].split(".")[0])):
        with io.TextIOWrapper(gzip.open(f, "rb"), encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        out.append((float(f.name.split("-")[1].split(".")[0]), [float(r["progress"]) for r in rows],
                    [float(r["grad_sqr"]) for r in rows], [float(r["grad_var"]) for r in rows]))
    return out


def _csv(path: Path) -> list[list[str]]:
    with io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8") as fh:
        return list(csv.reader(fh))[1:]


def main() -> None:
    from stint.perf.profile import APPLICATIONS

    for app in APPLICATIONS:
        print(write(app))


if __name__ == "__main__":
    main()
