"""The workers of a job as the checkpoint store's peers: a gloo process group of their own.

Checkpoint writes run on a thread beside training; their few messages (each worker's part, the
commit's outcome) go over this group, never over the one the training loop's collectives use, so
the two cannot interleave.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist


class GroupPeers:
    """:class:`stint.torch.store.Peers` over a process group spanning every worker of the job."""

    def __init__(self, rank: int, size: int, timeout: float) -> None:
        self.rank, self.size = rank, size
        # Collective: every worker creates it at the same point (Job._connect).
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))

    def gather(self, obj: Any) -> list[Any] | None:
        out: list[Any] | None = [None] * self.size if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.group)
        return out

    def broadcast(self, obj: Any) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group(self.group)
