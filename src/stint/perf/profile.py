"""A profile-based performance model from the Pollux step-time tables.

For an application, a placement (GPUs per node) and a global batch size, the model looks up the
measured time of one optimizer step and returns samples per second. Work is measured in
*training samples* (epochs x dataset size, see ``APPLICATIONS``).

Lookup, as in Pollux's simulator: a global batch ``B`` on ``n`` replicas gives a local batch
``ceil(B / n)``; above the application's largest profiled local batch it uses gradient
accumulation (``k`` extra micro-steps, each costing the step time minus the sync time). If the
placement was measured, step and sync times are interpolated linearly in the local batch;
otherwise linearly over (nodes, replicas, local batch) across all measurements (barycentric
interpolation in the Delaunay tetrahedron that contains the query, as scipy's
``LinearNDInterpolator`` does), falling back to the nearest measurement outside their convex hull.

The lookups are plain Python, without NumPy or SciPy, so a simulation imports neither: the
tetrahedra are computed once with SciPy's Qhull (``mesh.json.gz``, ``scripts/profile_meshes.py``)
and shipped with the parsed tables in one file per application (``stint.perf.tables``), and a
query walks from tetrahedron to neighbour towards the point.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from stint.model.allocation import Allocation
from stint.model.job import JobSpec
from stint.perf import tables
from stint.perf.progress import efficiency_table
from stint.perf.tables import canonical


@dataclass(frozen=True, slots=True)
class Application:
    """Training-length facts for one profiled application (approximate, see docs/simulator.md)."""

    name: str
    dataset_size: int  # training samples per epoch
    epochs: int  # epochs to completion (Pollux's max_epochs for the application)
    min_local_bsz: int
    max_local_bsz: int

    @property
    def work_samples(self) -> float:
        return float(self.dataset_size * self.epochs)


# Samples per epoch as the validation tables imply them (progress at the last epoch x the initial
# batch size / epochs: what a step at B0 processes), which for four of the six is the public
# training-set size; epochs are Pollux's; local batch bounds are the profiled ones (yolov3 capped
# at 8, as Pollux does).
APPLICATIONS: dict[str, Application] = {
    a.name: a
    for a in (
        Application("bert", 88_641, 2, 4, 12),  # SQuAD v1.1 features, fine-tuning
        Application("cifar10", 50_000, 100, 32, 1024),  # ResNet-18 on CIFAR-10
        Application("deepspeech2", 7_134, 80, 10, 80),  # tables: 28,536 steps of 20 over 80 epochs
        Application("imagenet", 1_281_167, 90, 20, 200),  # ResNet-50 on ImageNet-1k
        Application("ncf", 4_970_854, 10, 32, 32_768),  # tables: 194,174 steps of 256 over 10 epochs
        Application("yolov3", 16_551, 50, 4, 8),  # PASCAL VOC 07+12 trainval
    )
}


class _Table:
    """One application's measurements (``stint.perf.tables``)."""

    def __init__(self, app: str) -> None:
        shipped = tables.load(app)
        self.by_placement = shipped.placements
        self.points = shipped.points
        self.values = shipped.values
        self._shipped = shipped
        self._mesh: Mesh | None = None
        self._interpolated: dict[tuple[int, int, float], tuple[float, float]] = {}

    def times(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        hit = self.by_placement.get(placement)
        if hit is not None:
            bs, step, sync = hit
            return _interp(local_bsz, bs, step), _interp(local_bsz, bs, sync)
        # Unmeasured placements depend only on (nodes, replicas, local batch): one query per key.
        key = (min(len(placement), 16), sum(placement), float(local_bsz))
        got = self._interpolated.get(key)
        if got is None:
            if self._mesh is None:
                self._mesh = Mesh.of(self._shipped)
            got = self._interpolated[key] = self._mesh.at((float(key[0]), float(key[1]), key[2]))
        return got


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    """Linear interpolation in ascending ``xs``, clamped at the ends (as ``numpy.interp``)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_right(xs, x)
    w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] + w * (ys[i] - ys[i - 1])


Vec = tables.Vec


class Mesh:
    """Linear interpolation over a shipped Delaunay tetrahedralisation of the measurement points.

    Inside the points' convex hull a query's value is the barycentric blend of the values at the
    four corners of the tetrahedron that contains it (found by walking across the face opposite
    the most negative barycentric coordinate, or by a scan if the walk meets a flat
    tetrahedron); outside, the value of the nearest point (ties: the first in table order).
    """

    EPS = 100 * 2.220446049250313e-16  # as scipy's find_simplex

    def __init__(self, points: list[Vec], values: list[tuple[float, float]],
                 simplices: Sequence[int], neighbors: Sequence[int]) -> None:
        """``simplices``: four vertex indices per tetrahedron, flat; ``neighbors``: the
        tetrahedron across the face opposite each vertex (-1: none), flat (read lazily)."""
        self.points, self.values = points, values
        self._simplices, self._neighbors = simplices, neighbors
        self._inverse: dict[int, tuple[tuple[Vec, Vec, Vec], Vec] | None] = {}
        self._centres: dict[int, Vec] = {}

    @classmethod
    def of(cls, shipped: tables.Tables) -> Mesh:
        """The mesh shipped in an application's tables."""
        return cls(shipped.points, shipped.values, shipped.simplices, shipped.neighbors)

    def corners(self, s: int) -> tuple[int, int, int, int]:
        """The vertex indices of tetrahedron ``s``."""
        f = self._simplices
        return f[4 * s], f[4 * s + 1], f[4 * s + 2], f[4 * s + 3]

    def _across(self, s: int) -> tuple[int, int, int, int]:
        f = self._neighbors
        return f[4 * s], f[4 * s + 1], f[4 * s + 2], f[4 * s + 3]

    def at(self, x: Vec) -> tuple[float, float]:
        found = self._locate(x)
        if found is None:
            p = min(range(len(self.points)), key=lambda i: _dist2(self.points[i], x))
            return self.values[p]
        s, (c0, c1, c2, c3) = found
        v0, v1, v2, v3 = (self.values[v] for v in self.corners(s))
        return (c0 * v0[0] + c1 * v1[0] + c2 * v2[0] + c3 * v3[0],
                c0 * v0[1] + c1 * v1[1] + c2 * v2[1] + c3 * v3[1])

    def _locate(self, x: Vec) -> tuple[int, list[float]] | None:
        """The tetrahedron containing ``x`` and its barycentric coordinates; None outside the hull.

        Walks across the face opposite the most negative coordinate (the next most negative if
        that neighbour was visited); through a flat tetrahedron, to the unvisited neighbour whose
        centre is nearest; scans them all if the walk gets stuck."""
        s, seen = 0, set[int]()  # always from the first: a key's value never depends on earlier queries
        while len(seen) < 256:
            seen.add(s)
            c = self._barycentric(s, x)
            if c is None:
                nbrs = [n for n in self._across(s) if n != -1 and n not in seen]
                if not nbrs:
                    break
                s = min(nbrs, key=lambda n: _dist2(self._centre(n), x))
                continue
            order = sorted(range(4), key=c.__getitem__)
            if c[order[0]] >= -self.EPS:
                return s, c
            across = self._across(s)
            nxt = [across[k] for k in order if c[k] < -self.EPS]
            if -1 in nxt[:1]:  # beyond a face of the hull: outside every tetrahedron
                return None
            nxt = [n for n in nxt if n != -1 and n not in seen]
            if not nxt:
                break
            s = nxt[0]
        return self._scan(x)

    def _centre(self, s: int) -> Vec:
        got = self._centres.get(s)
        if got is None:
            a, b, c, d = (self.points[v] for v in self.corners(s))
            got = self._centres[s] = ((a[0] + b[0] + c[0] + d[0]) / 4, (a[1] + b[1] + c[1] + d[1]) / 4,
                                      (a[2] + b[2] + c[2] + d[2]) / 4)
        return got

    def _scan(self, x: Vec) -> tuple[int, list[float]] | None:
        for s in range(len(self._simplices) // 4):
            c = self._barycentric(s, x)
            if c is not None and c[0] >= -self.EPS and c[1] >= -self.EPS and c[2] >= -self.EPS \
                    and c[3] >= -self.EPS:
                return s, c
        return None

    def _barycentric(self, s: int, x: Vec) -> list[float] | None:
        if s in self._inverse:
            tf = self._inverse[s]
        else:
            tf = self._inverse[s] = _inverse_transform([self.points[v] for v in self.corners(s)])
        if tf is None:
            return None
        (r0, r1, r2), r = tf
        d0, d1, d2 = x[0] - r[0], x[1] - r[1], x[2] - r[2]
        c0 = r0[0] * d0 + r0[1] * d1 + r0[2] * d2
        c1 = r1[0] * d0 + r1[1] * d1 + r1[2] * d2
        c2 = r2[0] * d0 + r2[1] * d1 + r2[2] * d2
        return [c0, c1, c2, 1.0 - c0 - c1 - c2]


def _dist2(a: Vec, b: Vec) -> float:
    return (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2 + (a[2] - b[2]) ** 2


def _inverse_transform(corners: list[Vec]) -> tuple[tuple[Vec, Vec, Vec], Vec] | None:
    """Rows of T^-1, T = [v0 - v3, v1 - v3, v2 - v3] as columns, and v3; None if flat."""
    p, q, u, r = corners
    a, b, c = p[0] - r[0], q[0] - r[0], u[0] - r[0]
    d, e, f = p[1] - r[1], q[1] - r[1], u[1] - r[1]
    g, h, i = p[2] - r[2], q[2] - r[2], u[2] - r[2]
    det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    scale = max(abs(a), abs(b), abs(c), abs(d), abs(e), abs(f), abs(g), abs(h), abs(i)) or 1.0
    if abs(det) <= 1e-12 * scale ** 3:
        return None
    return (((e * i - f * h) / det, (c * h - b * i) / det, (b * f - c * e) / det),
            ((f * g - d * i) / det, (a * i - c * g) / det, (c * d - a * f) / det),
            ((d * h - e * g) / det, (b * g - a * h) / det, (a * e - b * d) / det)), r


@cache
def _table(app: str) -> _Table:
    return _Table(app)


class ProfileModel:
    """Samples per second of a Pollux-profiled application on an allocation.

    With ``progress=True`` (Pollux's job model, ``stint.perf.progress``) a job's work is the
    samples it needs at its batch size B, ``work(app, B)``, and its rate on an allocation that
    rounds the batch up to B' is the samples/s there times samples(B) / samples(B'): exact for a
    job whose batch stays fixed. Without, work is epochs x samples per epoch whatever the batch.

    With ``adaptive_batch`` (Pollux's agents) a job picks, on each allocation, the global batch
    that finishes it soonest (``best_batch``), i.e. the most goodput with the efficiency averaged
    over its whole run; its work stays in samples at its trace batch B, so the rate is scaled.
    """

    def __init__(self, progress: bool = False, adaptive_batch: bool = False) -> None:
        if adaptive_batch and not progress:
            raise ValueError("an adaptive batch size needs Pollux's job model (progress=True)")
        self.progress = progress
        self.adaptive_batch = adaptive_batch
        self._cache: dict[tuple[str, tuple[int, ...], int], float] = {}

    def rate(self, spec: JobSpec, allocation: Allocation) -> float:
        placement = canonical(tuple(c for _, c in allocation.workers))
        if not placement:
            return 0.0
        key = (spec.application, placement, spec.batch_size)
        r = self._cache.get(key)
        if r is None:
            app, b = spec.application, spec.batch_size
            if self.adaptive_batch:
                r = work(app, b) * max(_fraction_rate(app, placement, c) for c in candidate_batches(app, placement))
            elif self.progress:
                r = work(app, b) * _fraction_rate(app, placement, b)
            else:
                r = throughput(app, placement, b)
            self._cache[key] = r
        return r

    def best_batch(self, app: str, placement: tuple[int, ...]) -> int:
        """With ``adaptive_batch``: the global batch a job picks on ``placement``."""
        placement = canonical(placement)
        return max(candidate_batches(app, placement), key=lambda c: _fraction_rate(app, placement, c))

    def throughput(self, app: str, placement: tuple[int, ...], batch_size: int) -> float:
        """Samples/s for a global ``batch_size`` on ``placement`` (GPUs per node)."""
        return throughput(app, canonical(placement), batch_size)


@cache
def throughput(app: str, placement: tuple[int, ...], batch_size: int) -> float:
    """Samples/s for a global ``batch_size`` on a canonical ``placement``; cached per process
    (the measured tables never change), so every model, run and policy shares one lookup."""
    replicas, atomic, accum = _split(app, placement, batch_size)
    step, sync = _table(app).times(placement, atomic)
    total = step + accum * max(step - sync, 0.0)
    return replicas * atomic * (accum + 1) / total


def step_batch(app: str, placement: tuple[int, ...], batch_size: int) -> int:
    """The global batch one step really takes on ``placement``: ``batch_size`` rounded up to
    whole local batches (and accumulation micro-steps) on every replica."""
    replicas, atomic, accum = _split(app, placement, batch_size)
    return replicas * atomic * (accum + 1)


def _split(app: str, placement: tuple[int, ...], batch_size: int) -> tuple[int, int, int]:
    """(replicas, local batch per micro-step, extra accumulation micro-steps) for a global batch."""
    a = APPLICATIONS.get(app)
    if a is None:
        raise KeyError(f"no profile for application {app!r}; profiled: {', '.join(APPLICATIONS)}")
    replicas = sum(placement)
    local = max(math.ceil(batch_size / replicas - 1e-8), a.min_local_bsz)
    accum = math.ceil(local / a.max_local_bsz - 1e-8) - 1
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    return replicas, atomic, accum


def _fraction_rate(app: str, placement: tuple[int, ...], batch_size: int) -> float:
    """Fraction of the whole job done per second at a fixed global batch on ``placement``."""
    return throughput(app, placement, batch_size) / work(app, step_batch(app, placement, batch_size))


@cache
def candidate_batches(app: str, placement: tuple[int, ...]) -> tuple[int, ...]:
    """Global batches an adaptive job may pick on ``placement``: from the initial (smallest
    measured) batch, or a minimal local batch on every replica if that is more, to the largest
    measured one, on a geometric grid of 2^(1/4) steps (local batches above the largest profiled
    one use gradient accumulation)."""
    a = APPLICATIONS[app]
    table = efficiency_table(app, a.epochs)
    assert table is not None
    import numpy as np  # adaptive batches only (the pollux policy, which imports NumPy anyway)

    lo = max(float(table.batch_sizes[0]), float(sum(placement) * a.min_local_bsz))
    hi = max(float(table.batch_sizes[-1]), lo)
    grid = np.geomspace(lo, hi, max(int(np.log2(hi / lo) * 4) + 1, 1))
    return tuple(sorted({round(float(b)) for b in grid} | {int(b) for b in table.batch_sizes if lo <= b <= hi}))


def has_progress_tables(app: str) -> bool:
    """Whether ``app`` ships validation tables (Pollux's job model applies to it)."""
    a = APPLICATIONS.get(app)
    return a is not None and efficiency_table(app, a.epochs) is not None


def work(app: str, batch_size: float) -> float:
    """Samples a job of ``app`` needs at a fixed global batch to complete, in Pollux's job model
    (epochs x samples per epoch if the application ships no validation tables)."""
    a = APPLICATIONS[app]
    table = efficiency_table(app, a.epochs)
    return a.work_samples if table is None else table.samples(batch_size)
