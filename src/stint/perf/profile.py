"""A profile-based performance model from the Pollux step-time tables.

For an application, a placement (GPUs per node) and a global batch size, the model looks up the
measured time of one optimizer step and returns samples per second. Work is measured in
*training samples* (epochs x dataset size, see ``APPLICATIONS``).

Lookup, as in Pollux's simulator: a global batch ``B`` on ``n`` replicas gives a local batch
``ceil(B / n)``; above the application's largest profiled local batch it uses gradient
accumulation (``k`` extra micro-steps, each costing the step time minus the sync time). If the
placement was measured, step and sync times are interpolated linearly in the local batch;
otherwise linearly over (nodes, replicas, local batch) across all measurements (scipy's
``LinearNDInterpolator``), falling back to the nearest measurement outside their convex hull.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from stint.model.allocation import Allocation
from stint.model.job import JobSpec
from stint.perf.progress import efficiency_table


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
    """One application's measurements."""

    def __init__(self, app: str) -> None:
        base = resources.files("stint") / "data" / "pollux" / "profiles" / app
        self.by_placement: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        rows: dict[tuple[int, ...], list[tuple[float, float, float]]] = {}
        points: list[tuple[float, float, float, float, float]] = []
        for placement, bsz, step_s, sync_s in _read(Path(str(base / "placements.csv.gz"))):
            key = _canonical(tuple(int(c) for c in placement))
            rows.setdefault(key, []).append((float(bsz), float(step_s), float(sync_s)))
        for key, vals in rows.items():
            arr = np.array(sorted(vals))
            # Several rotations of one placement (e.g. "12" and "21") are averaged per batch size.
            bs = np.unique(arr[:, 0])
            step = np.array([arr[arr[:, 0] == b, 1].mean() for b in bs])
            sync = np.array([arr[arr[:, 0] == b, 2].mean() for b in bs])
            self.by_placement[key] = (bs, step, sync)
            for b, s, y in zip(bs, step, sync):
                points.append((float(len(key)), float(sum(key)), float(b), float(s), float(y)))
        for nodes, replicas, bsz, step_s, sync_s in _read(Path(str(base / "scalability.csv.gz"))):
            points.append((float(nodes), float(replicas), float(bsz), float(step_s), float(sync_s)))
        self.points = np.array(points)
        self._linear: Any = None
        self._nearest: Any = None
        self._interpolated: dict[tuple[int, int, float], tuple[float, float]] = {}

    def times(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        hit = self.by_placement.get(placement)
        if hit is not None:
            bs, step, sync = hit
            return float(np.interp(local_bsz, bs, step)), float(np.interp(local_bsz, bs, sync))
        # Unmeasured placements depend only on (nodes, replicas, local batch): one query per key.
        key = (min(len(placement), 16), sum(placement), float(local_bsz))
        got = self._interpolated.get(key)
        if got is None:
            got = self._interpolated[key] = self._interpolate(key)
        return got

    def _interpolate(self, key: tuple[int, int, float]) -> tuple[float, float]:
        from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator

        if self._linear is None:
            xs, ys = self.points[:, :3], self.points[:, 3:]
            self._linear = LinearNDInterpolator(xs, ys)
            self._nearest = NearestNDInterpolator(xs, ys)
        q = np.array([key], dtype=float)
        out = self._linear(q)[0]
        if np.isnan(out).any():
            out = self._nearest(q)[0]
        return float(out[0]), float(out[1])


def _read(path: Path) -> list[list[str]]:
    with io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[1:]


def _canonical(placement: tuple[int, ...]) -> tuple[int, ...]:
    """Per-node GPU counts, zeros dropped, largest first (the order of nodes does not matter)."""
    return tuple(sorted((c for c in placement if c > 0), reverse=True))


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
        placement = _canonical(tuple(c for _, c in allocation.workers))
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
        placement = _canonical(placement)
        return max(candidate_batches(app, placement), key=lambda c: _fraction_rate(app, placement, c))

    def throughput(self, app: str, placement: tuple[int, ...], batch_size: int) -> float:
        """Samples/s for a global ``batch_size`` on ``placement`` (GPUs per node)."""
        return throughput(app, _canonical(placement), batch_size)


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
