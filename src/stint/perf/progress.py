"""Pollux's job model: progress weighted by statistical efficiency, from the validation tables.

Each profiled application ships one table per measured global batch size B
(``data/pollux/profiles/<app>/validation-<B>.csv.gz``, read through ``stint.perf.tables``): per
epoch, the cumulative *progress* (in optimizer steps at the application's initial batch size B0,
weighted by statistical efficiency) and the gradient statistics measured during that epoch
(``grad_sqr``, the squared norm of the mean gradient; ``grad_var``, its variance). From them (Pollux, OSDI'21, §3.1):

- epoch e ends when progress reaches p_e, the smallest progress any table records at epoch e;
  the job is complete at p_E, E the application's last epoch (``Application.epochs``);
- one step at batch B during epoch e advances progress by the gain
  (grad_var + grad_sqr) / (grad_var / s + grad_sqr), s = B / B0, with that epoch's statistics
  at batch B (interpolated linearly in log B between the measured sizes, clamped at the ends);
- so a job kept at batch B needs ``steps(B)`` = sum over epochs of (p_e - p_{e-1}) / gain_e(B)
  steps, i.e. ``samples(B)`` = B x steps(B) samples.

Large batches make less progress per sample, so they need more samples: CIFAR-10 at B = 4,096
needs 1.76x the samples of B0 = 128. The engine needs a constant rate between events, which
this gives exactly for a job whose batch stays fixed: its work is ``samples(B)`` and its rate on
an allocation is the samples/s there, scaled by samples(B) / samples(B') when the allocation
rounds the batch up to B' (a local batch of ceil(B / replicas) on each replica).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from functools import cache

from stint.perf import tables


@dataclass(frozen=True, eq=False)
class EfficiencyTable:
    """One application's validation tables, cut at its last epoch (plain tuples: a few dozen
    numbers per epoch, read without NumPy so a simulation need not import it)."""

    app: str
    batch_sizes: tuple[float, ...]  # measured global batch sizes, ascending; [0] is B0
    grad_sqr: tuple[tuple[float, ...], ...]  # [batch size][epoch]
    grad_var: tuple[tuple[float, ...], ...]  # [batch size][epoch]
    epoch_progress: tuple[float, ...]  # [epoch]: p_e, the smallest progress recorded at epoch e

    @property
    def initial_batch(self) -> int:
        return int(self.batch_sizes[0])

    @property
    def target(self) -> float:
        """Progress at completion (the last epoch's), in steps at the initial batch size."""
        return float(self.epoch_progress[-1])

    def gains(self, batch: float) -> list[float]:
        """Progress per step at global batch ``batch``, per epoch."""
        x = [math.log(b) for b in self.batch_sizes]
        q = min(max(math.log(max(float(batch), 1.0)), x[0]), x[-1])
        hi = min(bisect_right(x, q), len(x) - 1)
        lo = max(hi - 1, 0)
        w = 0.0 if hi == lo else (q - x[lo]) / (x[hi] - x[lo])
        scale = float(batch) / self.initial_batch
        out = []
        for sl, sh, vl, vh in zip(self.grad_sqr[lo], self.grad_sqr[hi], self.grad_var[lo], self.grad_var[hi]):
            sqr, var = (1 - w) * sl + w * sh, (1 - w) * vl + w * vh
            out.append((var + sqr) / (var / scale + sqr))
        return out

    def steps(self, batch: float) -> float:
        """Optimizer steps at a fixed global ``batch`` from the start to completion."""
        return steps_to_complete(self, float(batch))

    def samples(self, batch: float) -> float:
        """Training samples at a fixed global ``batch`` from the start to completion."""
        return float(batch) * self.steps(batch)


@cache
def steps_to_complete(table: EfficiencyTable, batch: float) -> float:
    """``table.steps(batch)``, cached per (table, batch): it sums over every epoch."""
    prev, total = 0.0, 0.0
    for p, g in zip(table.epoch_progress, table.gains(batch)):
        total += (p - prev) / g
        prev = p
    return total


@cache
def efficiency_table(app: str, epochs: int) -> EfficiencyTable | None:
    """The shipped tables of ``app`` cut at ``epochs``, or None if it ships none."""
    validation = tables.load(app).validation
    if not validation:
        return None
    for b, progress, _, _ in validation:
        if len(progress) < epochs:
            raise ValueError(f"{app}'s validation table at batch {b:g}: {len(progress)} epochs recorded, "
                             f"it needs {epochs}")
    return EfficiencyTable(
        app=app,
        batch_sizes=tuple(b for b, _, _, _ in validation),
        grad_sqr=tuple(tuple(sqr[:epochs]) for _, _, sqr, _ in validation),
        grad_var=tuple(tuple(var[:epochs]) for _, _, _, var in validation),
        epoch_progress=tuple(min(col) for col in zip(*(p[:epochs] for _, p, _, _ in validation))),
    )
