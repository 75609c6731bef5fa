"""Compute the Delaunay tetrahedra of each profiled application's measurements (SciPy's Qhull)
and write them beside its tables, ``src/stint/data/pollux/profiles/<app>/mesh.json.gz``.

The profile model (``stint.perf.profile``) interpolates over them in plain Python; it refuses a
mesh whose points differ from the tables'. Run again whenever the tables change:
    .venv/bin/python scripts/profile_meshes.py
"""

from __future__ import annotations

import gzip
import json

import numpy as np
from scipy.spatial import Delaunay

from stint.perf.profile import APPLICATIONS, _base, _Table, points_digest


def main() -> None:
    for app in APPLICATIONS:
        table = _Table(app)
        tri = Delaunay(np.array(table.points))  # the triangulation scipy's LinearNDInterpolator builds
        data = {"digest": points_digest(table.points), "points": len(table.points),
                "simplices": tri.simplices.ravel().tolist(), "neighbors": tri.neighbors.ravel().tolist()}
        path = _base(app) / "mesh.json.gz"
        with gzip.GzipFile(path, "wb", mtime=0) as fh:
            fh.write(json.dumps(data, separators=(",", ":")).encode())
        print(f"{path}: {len(tri.simplices)} tetrahedra over {len(table.points)} points")


if __name__ == "__main__":
    main()
