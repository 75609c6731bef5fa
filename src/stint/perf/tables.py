"""Pollux's profile tables in the form a simulation reads: one ``tables.bin`` per application.

The sources, in ``data/pollux/profiles/<app>/``, are the measured tables (``placements.csv.gz``,
``scalability.csv.gz``, ``validation-<B>.csv.gz``) and the Delaunay mesh over their points
(``mesh.json.gz``, SciPy's Qhull, ``scripts/profile_meshes.py``). Parsing the CSVs and the mesh
cost ~50 ms of every Pollux run (JSON of them still ~20 ms); ``build`` does it once, into one
binary file per application that ``load`` maps without parsing:

- line 1: a JSON header, padded with spaces to a multiple of 8 bytes (newline included):
  ``{"placements": [[placement, batches], ...], "scalability": rows, "validation": [[B, epochs],
  ...], "tetrahedra": M}`` (placements as GPUs per node, largest first; rotations of one
  placement, e.g. "12" and "21", averaged per local batch; B ascending);
- then float64s: per placement its local batches (ascending), step s and sync s; per scalability
  row (nodes, replicas, local batch, step s, sync s); per validation table its progress, grad_sqr
  and grad_var per epoch;
- then int32s: the mesh's four vertex indices per tetrahedron, then its four neighbours (-1: none).

All little-endian. Floats are copied bit for bit, so every lookup gives the value the CSVs give.
The shipped files are generated, never edited: ``python -m stint.perf.tables`` (or
``scripts/profile_meshes.py``, which also recomputes the meshes) rewrites them, and
``tests/sim/test_profile_tables.py`` checks that each equals what ``build`` produces.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from stint import data_path

Vec = tuple[float, float, float]
Placement = tuple[tuple[int, ...], list[float], list[float], list[float]]  # (placement, batches, step, sync)
Validation = tuple[float, list[float], list[float], list[float]]  # (B, progress, grad_sqr, grad_var)


@dataclass(frozen=True, slots=True)
class Sources:
    """What the measured tables say, parsed."""

    placements: list[Placement]  # in table order
    scalability: list[tuple[float, float, float, float, float]]  # (nodes, replicas, local batch, step, sync)
    validation: list[Validation]  # B ascending

    @property
    def points(self) -> list[Vec]:
        """(nodes, replicas, local batch) of every measurement, the mesh's vertices."""
        return points_and_values(self.placements, self.scalability)[0]


@dataclass(frozen=True, slots=True)
class Tables:
    """One application's shipped tables, as ``stint.perf.profile`` and ``stint.perf.progress`` use them."""

    placements: dict[tuple[int, ...], tuple[list[float], list[float], list[float]]]  # -> (batches, step, sync)
    points: list[Vec]  # as ``points_and_values``
    values: list[tuple[float, float]]  # (step s, sync s) at each point
    simplices: Sequence[int]  # four vertex indices per tetrahedron, flat
    neighbors: Sequence[int]  # four neighbouring tetrahedra (-1: none) per tetrahedron, flat
    validation: list[Validation]


def profile_dir(app: str) -> Path:
    return data_path(f"pollux/profiles/{app}")


def points_and_values(placements: list[Placement], scalability: list[tuple[float, float, float, float, float]]
                      ) -> tuple[list[Vec], list[tuple[float, float]]]:
    """The interpolation's points (nodes, replicas, local batch) and values (step, sync): every
    measured placement's batches, then every scalability row."""
    points: list[Vec] = []
    values: list[tuple[float, float]] = []
    for key, bs, step, sync in placements:
        for b, st, sy in zip(bs, step, sync):
            points.append((float(len(key)), float(sum(key)), b))
            values.append((st, sy))
    for nodes, replicas, bsz, step_s, sync_s in scalability:
        points.append((nodes, replicas, bsz))
        values.append((step_s, sync_s))
    return points, values


def points_digest(points: list[Vec]) -> str:
    """Identifies the measurement points a mesh was computed from."""
    return f"crc32:{zlib.crc32(repr(points).encode()):08x}"


def canonical(placement: tuple[int, ...]) -> tuple[int, ...]:
    """Per-node GPU counts, zeros dropped, largest first (the order of nodes does not matter)."""
    return tuple(sorted((c for c in placement if c > 0), reverse=True))


def read_sources(app: str) -> Sources:
    """Parse ``app``'s measured tables."""
    base = profile_dir(app)
    rows: dict[tuple[int, ...], dict[float, list[tuple[float, float]]]] = {}
    for placement, bsz, step_s, sync_s in _csv(base / "placements.csv.gz"):
        key = canonical(tuple(int(c) for c in placement))
        rows.setdefault(key, {}).setdefault(float(bsz), []).append((float(step_s), float(sync_s)))
    placements = []
    for key, by_bsz in rows.items():
        bs = sorted(by_bsz)
        step = [sum(v[0] for v in by_bsz[b]) / len(by_bsz[b]) for b in bs]
        sync = [sum(v[1] for v in by_bsz[b]) / len(by_bsz[b]) for b in bs]
        placements.append((key, bs, step, sync))
    scalability = [(float(n), float(r), float(b), float(st), float(sy))
                   for n, r, b, st, sy in _csv(base / "scalability.csv.gz")]
    return Sources(placements, scalability, _validation(base))


def build(app: str) -> bytes:
    """The bytes of ``app``'s ``tables.bin``: its sources and its mesh (refused if the mesh was
    computed from other points than the tables')."""
    src = read_sources(app)
    path = profile_dir(app) / "mesh.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        mesh = json.load(fh)
    if mesh["digest"] != points_digest(src.points):
        raise ValueError(f"{path}: computed from other measurements than {app}'s tables; "
                         "run scripts/profile_meshes.py")
    head = json.dumps({"placements": [[list(p), len(bs)] for p, bs, _, _ in src.placements],
                       "scalability": len(src.scalability),
                       "validation": [[b, len(prog)] for b, prog, _, _ in src.validation],
                       "tetrahedra": len(mesh["simplices"]) // 4}, separators=(",", ":"))
    head += " " * (-(len(head) + 1) % 8) + "\n"
    floats = array("d", [x for _, bs, step, sync in src.placements for x in (*bs, *step, *sync)])
    floats.extend(x for row in src.scalability for x in row)
    floats.extend(x for _, prog, sqr, var in src.validation for x in (*prog, *sqr, *var))
    ints = array("i", mesh["simplices"] + mesh["neighbors"])
    if sys.byteorder == "big":
        floats.byteswap()
        ints.byteswap()
    return head.encode() + floats.tobytes() + ints.tobytes()


def write(app: str) -> Path:
    """Rewrite ``app``'s shipped ``tables.bin`` from its sources."""
    path = profile_dir(app) / "tables.bin"
    path.write_bytes(build(app))
    return path


@cache
def load(app: str) -> Tables:
    """``app``'s shipped tables, read once per process (the mesh as arrays, not Python lists)."""
    data = (profile_dir(app) / "tables.bin").read_bytes()
    end = data.index(b"\n") + 1
    head = json.loads(data[:end])
    n_floats = (sum(3 * n for _, n in head["placements"]) + 5 * head["scalability"]
                + sum(3 * e for _, e in head["validation"]))
    floats: list[float] = _numbers(data[end:end + 8 * n_floats], "d").tolist()
    ints: array[int] = _numbers(data[end + 8 * n_floats:], "i")
    at, placements = 0, []
    for p, n in head["placements"]:
        placements.append((tuple(p), floats[at:at + n], floats[at + n:at + 2 * n], floats[at + 2 * n:at + 3 * n]))
        at += 3 * n
    rows = iter(floats[at:at + 5 * head["scalability"]])
    scalability = list(zip(rows, rows, rows, rows, rows))
    at += 5 * head["scalability"]
    validation: list[Validation] = []
    for b, e in head["validation"]:
        validation.append((b, floats[at:at + e], floats[at + e:at + 2 * e], floats[at + 2 * e:at + 3 * e]))
        at += 3 * e
    points, values = points_and_values(placements, scalability)
    m = 4 * head["tetrahedra"]
    return Tables({p: (bs, step, sync) for p, bs, step, sync in placements}, points, values,
                  ints[:m], ints[m:2 * m], validation)


def _numbers(raw: bytes, code: str) -> array[Any]:
    """The little-endian numbers of type ``code`` ("d": float64, "i": int32) in ``raw``."""
    out = array(code, raw)
    if sys.byteorder == "big":
        out.byteswap()
    return out


def _validation(base: Path) -> list[Validation]:
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
    for app in sorted(d.name for d in data_path("pollux/profiles").iterdir() if d.is_dir()):
        print(write(app))


if __name__ == "__main__":
    main()
