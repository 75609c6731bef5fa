"""Compute the Delaunay tetrahedra of each profiled application's measurements (SciPy's Qhull)
and write them beside its tables, ``src/stint/data/pollux/profiles/<app>/mesh.json.gz``, then the
shipped ``tables.bin`` that carries them with the parsed tables (``stint.perf.tables``).

The profile model (``stint.perf.profile``) interpolates over them in plain Python; a mesh whose
points differ from the tables' is refused. Run again whenever the tables change:
    .venv/bin/python scripts/profile_meshes.py
"""

from __future__ import annotations

import gzip
import json

import numpy as np
from scipy.spatial import Delaunay

from stint.perf import tables
from stint.perf.profile import APPLICATIONS


def main() -> None:
    for app in APPLICATIONS:
        src = tables.read_sources(app)
        tri = Delaunay(np.array(src.points))  # the triangulation scipy's LinearNDInterpolator builds
        data = {"digest": tables.points_digest(src.points), "points": len(src.points),
                "simplices": tri.simplices.ravel().tolist(), "neighbors": tri.neighbors.ravel().tolist()}
        path = tables.profile_dir(app) / "mesh.json.gz"
        with gzip.GzipFile(path, "wb", mtime=0) as fh:
            fh.write(json.dumps(data, separators=(",", ":")).encode())
        print(f"{path}: {len(tri.simplices)} tetrahedra over {len(src.points)} points")
        print(tables.write(app))


if __name__ == "__main__":
    main()
