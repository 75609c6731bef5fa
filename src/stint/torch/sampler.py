"""A seeded sampler whose global batch at step s is a pure function of (seed, s).

Its data position is the step itself, so resuming needs nothing but the step, and logical rank l
always gets slice l of the global batch, whatever the number of physical workers.
"""

from __future__ import annotations

import hashlib

import torch


class Sampler:
    """Index batches over a dataset of ``n`` items: reshuffled every epoch, last partial batch dropped."""

    def __init__(self, n: int, batch_size: int, seed: int = 0, shuffle: bool = True) -> None:
        if not 0 < batch_size <= n:
            raise ValueError(f"Sampler: batch_size={batch_size} must be in [1, n={n}]")
        self.n, self.batch_size, self.seed, self.shuffle = n, batch_size, seed, shuffle
        self.steps_per_epoch = n // batch_size
        self._epoch = -1
        self._order = torch.arange(n)

    def epoch(self, step: int) -> int:
        return step // self.steps_per_epoch

    def global_batch(self, step: int) -> torch.Tensor:
        """The indices of the whole global batch of ``step``."""
        epoch, i = divmod(step, self.steps_per_epoch)
        if self.shuffle and epoch != self._epoch:
            digest = hashlib.sha256(f"{self.seed}:{epoch}".encode()).digest()
            g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
            self._order, self._epoch = torch.randperm(self.n, generator=g), epoch
        return self._order[i * self.batch_size : (i + 1) * self.batch_size]

    def shard(self, step: int, logical_rank: int, logical_world_size: int) -> torch.Tensor:
        """Logical rank ``logical_rank``'s contiguous share of the global batch of ``step``."""
        if self.batch_size % logical_world_size:
            raise ValueError(
                f"Sampler: batch_size={self.batch_size} is not divisible by the "
                f"{logical_world_size} logical ranks"
            )
        k = self.batch_size // logical_world_size
        return self.global_batch(step)[logical_rank * k : (logical_rank + 1) * k]
