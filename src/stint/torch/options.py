"""What ``stint.init`` is told: its keywords (all but the objects it tracks and the ``counters``
dict, which the job keeps as its own state), checked once, held by the job unchanged."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from stint.torch.interval import Interval

# ``exchange=``: how gradients travel (None: chosen by their size; stint.torch.exchange).
EXCHANGES: dict[str, bool | None] = {"auto": None, "sharded": True, "gathered": False}


@dataclass(frozen=True)
class JobOptions:
    """``stint.init``'s options (docs/torch-sdk.md, "API"); a bad one is an error naming it."""

    seed: int = 0
    logical_world_size: int | None = None  # L when the environment does not set it (by hand)
    ckpt_dir: str | os.PathLike[str] | None = None  # when the environment does not set it
    interval: Interval = field(default_factory=Interval)  # periodic checkpoints (default: none)
    keep: int = 2  # checkpoints kept on disk
    final_checkpoint: bool = True
    background: bool = True  # periodic checkpoints written on a thread from a snapshot
    rank_counters: dict[str, Any] = field(default_factory=dict)  # start values, per logical rank
    check_every: int | None = 100  # steps between replica comparisons (None: never)
    exchange: str = "auto"  # a key of EXCHANGES
    shard: bool = False  # the tracked model's state sharded by logical rank (stint.torch.sharded)

    def __post_init__(self) -> None:
        if self.exchange not in EXCHANGES:
            raise ValueError(f"stint.init: exchange={self.exchange!r} must be one of {sorted(EXCHANGES)}")
        if self.check_every is not None and self.check_every < 1:
            raise ValueError(f"stint.init: check_every={self.check_every} must be a positive number of steps")
        if self.keep < 1:
            raise ValueError(f"stint.init: keep={self.keep} must be at least 1 (the checkpoints kept on disk)")
        if self.logical_world_size is not None and self.logical_world_size < 1:
            raise ValueError(f"stint.init: logical_world_size={self.logical_world_size} must be a positive "
                             "number of logical ranks")
        if not isinstance(self.interval, Interval):
            raise TypeError(f"stint.init: interval={self.interval!r} must be a stint.Interval (or None: no "
                            "periodic checkpoints)")
