"""Per-logical-rank random streams: swapping them in turn equals running each rank on its own."""

from __future__ import annotations

import random

import numpy as np
import torch

from stint.torch import rng


def _draw(kind: str) -> list:
    """One micro-batch's randomness; some kinds leave NumPy's Gaussian cache full or use it."""
    if kind == "normal-odd":
        return np.random.randn(3).tolist()  # odd count: the second Gaussian of a pair is cached
    if kind == "normal-one":
        return [np.random.standard_normal()]  # may come from the cache without drawing MT words
    if kind == "numpy-uniform":
        return [np.random.rand()]
    if kind == "python":
        return [random.random(), random.gauss(0, 1)]
    if kind == "torch":
        return torch.rand(2).tolist()
    return []  # a micro-batch without randomness


KINDS = ["normal-odd", "normal-one", "none", "numpy-uniform", "python", "torch", "normal-one", "none"]


def test_swapping_logical_ranks_equals_separate_streams():
    ranks = range(3)
    alone = {}
    for lr in ranks:  # each rank alone, on the live generators
        rng.restore(rng.seed_states(7, lr))
        alone[lr] = [_draw(KINDS[(i + lr) % len(KINDS)]) for i in range(12)]
    swapper = rng.Swapper({lr: rng.seed_states(7, lr) for lr in ranks})
    sliced = {lr: [] for lr in ranks}
    for i in range(12):  # the ranks time-sliced on one worker
        for lr in ranks:
            swapper.enter(lr)
            sliced[lr].append(_draw(KINDS[(i + lr) % len(KINDS)]))
            swapper.leave(lr)
    assert sliced == alone
    # The states it hands to a checkpoint continue each stream exactly.
    saved = swapper.states()
    for lr in ranks:
        rng.restore(saved[lr])
        after = [np.random.standard_normal(), random.random(), torch.rand(1).item()]
        rng.restore(rng.seed_states(7, lr))
        for i in range(12):
            _draw(KINDS[(i + lr) % len(KINDS)])
        assert after == [np.random.standard_normal(), random.random(), torch.rand(1).item()]


def test_numpy_fast_path_matches_this_numpy():
    assert rng._NumpyLegacy().fast  # if NumPy's layout changes, the slow path still works; say so
