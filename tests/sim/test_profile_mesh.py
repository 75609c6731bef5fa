"""The profile model's plain-Python interpolation against SciPy's, on the shipped meshes."""

import random

import numpy as np
import pytest
from scipy.interpolate import LinearNDInterpolator

from stint.perf import tables
from stint.perf.profile import APPLICATIONS, Mesh, _dist2, _Table


@pytest.mark.slow
@pytest.mark.parametrize("app", sorted(APPLICATIONS))
def test_mesh_interpolates_as_scipy_does(app):
    table = _Table(app)
    mesh = Mesh.of(tables.load(app))
    scipy = LinearNDInterpolator(np.array(table.points), np.array(table.values))
    a, rng = APPLICATIONS[app], random.Random(app)
    inside = outside = 0
    for _ in range(120):
        # Off the integer lattice, where every containing tetrahedron gives the same value.
        nodes = rng.uniform(1, 16)
        q = (nodes, rng.uniform(nodes, 4 * nodes), rng.uniform(a.min_local_bsz, a.max_local_bsz))
        ref, got = scipy(np.array([q]))[0], mesh.at(q)
        if np.isnan(ref).any():  # outside the hull: the nearest measurement
            outside += 1
            d = min(_dist2(p, q) for p in table.points)
            assert got in [v for p, v in zip(table.points, table.values) if _dist2(p, q) == d]
        else:
            inside += 1
            assert got == pytest.approx(tuple(ref), rel=1e-9, abs=1e-12), q
    assert inside > 20

