"""The worker's view of its job, read from the environment the executor sets.

The contract (docs/torch-sdk.md): ``STINT_JOB_ID``, ``STINT_RANK``, ``STINT_WORLD_SIZE`` (P physical
workers), ``STINT_LOGICAL_WORLD_SIZE`` (L logical ranks, P divides L), ``STINT_CKPT_DIR``,
``STINT_MASTER_ADDR``, ``STINT_MASTER_PORT``, optional ``STINT_STATUS_FILE`` and
``STINT_STOP_FILE`` (a stop request when it exists), and the optional extension
``STINT_LOGICAL_RANKS`` (the logical ranks this worker hosts, e.g. ``"2,3"``; by default
``rank, rank + P, ...``).
Without them a script runs as one worker hosting every logical rank (P = 1).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


class JobEnvError(ValueError):
    """A STINT_* variable (or an init() argument) is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class JobEnv:
    """Who this worker is within its job, and where the job keeps its checkpoints."""

    job_id: str
    rank: int
    world_size: int
    logical_world_size: int
    logical_ranks: tuple[int, ...]
    ckpt_dir: Path | None
    master_addr: str
    master_port: int
    status_file: Path | None
    stop_file: Path | None = None

    @property
    def per_worker(self) -> int:
        """How many logical ranks each physical worker hosts (L / P)."""
        return self.logical_world_size // self.world_size


def _int(env: Mapping[str, str], name: str, default: int | None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise JobEnvError(f"environment variable {name} is required when STINT_RANK is set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise JobEnvError(f"environment variable {name}={raw!r} is not an integer") from None


def round_robin(rank: int, world_size: int, logical_world_size: int) -> tuple[int, ...]:
    """The logical ranks worker ``rank`` hosts by default: ``rank, rank + P, rank + 2P, ...``, so
    that the i-th micro-batches of all workers are consecutive ranks (stint.torch.exchange folds
    them in rank order as they come, with no side buffer)."""
    return tuple(range(rank, logical_world_size, world_size))


def _logical_ranks(env: Mapping[str, str], rank: int, p: int, lws: int) -> tuple[int, ...]:
    raw = env.get("STINT_LOGICAL_RANKS", "")
    if not raw:
        return round_robin(rank, p, lws)
    try:
        ranks = tuple(int(x) for x in raw.split(","))
    except ValueError:
        raise JobEnvError(f"STINT_LOGICAL_RANKS={raw!r} is not a comma-separated list of integers") from None
    if len(ranks) != lws // p or len(set(ranks)) != len(ranks) or not all(0 <= r < lws for r in ranks):
        raise JobEnvError(
            f"STINT_LOGICAL_RANKS={raw!r} must name {lws // p} distinct logical ranks in [0, {lws})"
        )
    return ranks


def read_env(
    env: Mapping[str, str] | None = None,
    *,
    logical_world_size: int | None = None,
    ckpt_dir: str | os.PathLike[str] | None = None,
) -> JobEnv:
    """Build the JobEnv from ``env`` (default ``os.environ``); the environment wins over arguments.

    ``logical_world_size`` and ``ckpt_dir`` are the script's defaults for running by hand.
    """
    env = os.environ if env is None else env
    p = _int(env, "STINT_WORLD_SIZE", 1)
    rank = _int(env, "STINT_RANK", 0)
    lws = _int(env, "STINT_LOGICAL_WORLD_SIZE", logical_world_size or p)
    if p < 1 or lws < 1 or lws % p != 0:
        raise JobEnvError(
            f"STINT_WORLD_SIZE={p} must be >= 1 and divide STINT_LOGICAL_WORLD_SIZE={lws}"
        )
    if not 0 <= rank < p:
        raise JobEnvError(f"STINT_RANK={rank} is outside [0, STINT_WORLD_SIZE={p})")
    ckpt = env.get("STINT_CKPT_DIR") or (os.fspath(ckpt_dir) if ckpt_dir is not None else None)
    status = env.get("STINT_STATUS_FILE") or None
    stop = env.get("STINT_STOP_FILE") or None
    return JobEnv(
        job_id=env.get("STINT_JOB_ID", "local"),
        rank=rank,
        world_size=p,
        logical_world_size=lws,
        logical_ranks=_logical_ranks(env, rank, p, lws),
        ckpt_dir=Path(ckpt) if ckpt else None,
        master_addr=env.get("STINT_MASTER_ADDR") or env.get("MASTER_ADDR") or "127.0.0.1",
        master_port=_int(env, "STINT_MASTER_PORT", _int(env, "MASTER_PORT", 29500)),
        status_file=Path(status) if status else None,
        stop_file=Path(stop) if stop else None,
    )
