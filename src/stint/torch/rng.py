"""Random-number generator states of one logical rank: Python, NumPy and torch (and CUDA if present).

Every logical rank owns its own streams, so dropout masks and augmentations of logical rank l are
the same whichever physical worker hosts it, and a resize does not change them.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_states(seed: int, logical_rank: int) -> dict[str, Any]:
    """Fresh states for ``logical_rank``, derived from the job seed; leaves the live generators as found."""
    saved = capture()
    s = seed * 1_000_003 + logical_rank
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)
    fresh = capture()
    restore(saved)
    return fresh


def capture() -> dict[str, Any]:
    """The live generators' states."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore(states: dict[str, Any]) -> None:
    """Make ``states`` the live generators' states."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
