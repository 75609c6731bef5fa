"""The Job: a training loop's handle on checkpoints, preemption and elastic logical ranks.

Typical use (five changed lines)::

    import stint.torch as stint
    job = stint.init(model=model, optimizer=opt, scheduler=sched)
    sampler = stint.Sampler(len(data), batch_size=64, seed=0)
    for step in job.steps(total_steps):
        opt.zero_grad()
        for idx in job.batches(sampler):        # one micro-batch per hosted logical rank
            loss_fn(model(x[idx]), y[idx]).backward()
        opt.step(); sched.step()

At every step boundary the workers agree (on the step's own collective) whether to stop or to
checkpoint; on a stop request (SIGUSR1 or SIGTERM) they write one checkpoint for the whole job
and exit with code 75. On start the job resumes from the newest valid checkpoint.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from stint.torch import codec, rng, signals
from stint.torch.env import JobEnv, JobEnvError, read_env
from stint.torch.exchange import CHECKPOINT, STOP, Exchange, agree
from stint.torch.interval import Interval
from stint.torch.sampler import Sampler
from stint.torch.store import CheckpointStore, SaveStats

PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL: "stopped cleanly at a checkpoint, resume me"
_STATUS_EVERY = 1.0  # seconds between status-file updates


class Job:
    """One worker's handle on its job. Build it with :func:`init`."""

    def __init__(
        self,
        env: JobEnv,
        tracked: dict[str, Any],
        *,
        seed: int = 0,
        interval: Interval | None = None,
        keep: int = 2,
        final_checkpoint: bool = True,
        background: bool = True,
        counters: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 300.0,
    ) -> None:
        for name, obj in tracked.items():
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError(f"stint.init: {name}={type(obj).__name__} has no state_dict/load_state_dict")
        self.env = env
        self.tracked = tracked
        self.counters: dict[str, Any] = dict(counters or {})
        self.step = 0
        self.interval = interval or Interval()
        self.final_checkpoint = final_checkpoint
        self.store = CheckpointStore(env.ckpt_dir, keep=keep) if env.ckpt_dir else None
        self.last_save: SaveStats | None = None
        self.checkpoint_stall: float | None = None  # seconds the last checkpoint blocked training
        self.background = background
        self._in_flight: threading.Thread | None = None
        self._write_error: BaseException | None = None
        self.checkpoint_step: int | None = None
        self._clock = clock
        self._agreed: int | None = None
        self._owns_group = False
        self._status_at = -_STATUS_EVERY
        self._cost: float | None = None
        modules = [m for m in tracked.values() if isinstance(m, torch.nn.Module)]
        self._params = _unique(p for m in modules for p in m.parameters() if p.requires_grad)
        self._buffers = _unique(b for m in modules for b in m.buffers())
        self._connect(timeout)
        self._rng = {lr: rng.seed_states(seed, lr) for lr in env.logical_ranks}
        self._exchange = Exchange(self._params, self.placement) if env.logical_world_size > 1 else None
        self._resume()
        self._swapper = rng.Swapper(self._rng) if len(env.logical_ranks) > 1 else None
        if self._swapper is None:
            rng.restore(self._rng[env.logical_ranks[0]])  # the live generators are this rank's own
        self._last_ckpt_clock, self._last_ckpt_step = clock(), self.step
        if self.store:
            signals.arm()

    # ---- the training loop's API ---------------------------------------------------------
    @property
    def logical_world_size(self) -> int:
        return self.env.logical_world_size

    def steps(self, total: int) -> Iterator[int]:
        """Yield the steps still to run, from the resumed one to ``total - 1``.

        At each boundary: stop (checkpoint, exit 75) or checkpoint if the workers agreed so.
        After the last step: a final checkpoint (unless disabled) and a normal return.
        """
        while self.step < total:
            self._boundary()
            yield self.step
            self.step += 1
            self._write_status("running", force=False)
        if self.final_checkpoint:
            self._checkpoint()
        self._write_status("finished", force=True)
        self._close()

    def logical_ranks(self) -> Iterator[int]:
        """Yield each logical rank this worker hosts; run one micro-batch (forward+backward) per rank.

        When the loop ends, every parameter's ``.grad`` is the mean of the L logical ranks'
        gradients, summed in logical-rank order (bitwise independent of the number of workers).
        """
        hosted = self.env.logical_ranks
        if self._exchange is None:  # L = 1: nothing to swap or reduce
            yield hosted[0]
            return
        swap = self._swapper
        before = [b.clone() for b in self._buffers] if swap else []
        after0: list[torch.Tensor] = []
        for slot, lr in enumerate(hosted):
            if swap:
                swap.enter(lr)
                _copy_into(self._buffers, before)
            yield lr
            if swap:
                swap.leave(lr)
                if lr == 0:
                    after0 = [b.clone() for b in self._buffers]
            self._exchange.stash(slot)
        if after0:
            _copy_into(self._buffers, after0)
        self._agreed = self._exchange.reduce(self._local_flags(self.step + 1))
        self._sync_buffers()

    def batches(self, sampler: Sampler) -> Iterator[torch.Tensor]:
        """Like :meth:`logical_ranks`, yielding each hosted logical rank's share of the global batch."""
        for lr in self.logical_ranks():
            yield sampler.shard(self.step, lr, self.env.logical_world_size)

    def request_stop(self) -> None:
        """Ask the job to checkpoint and exit with code 75 at the next step boundary (what SIGUSR1 does)."""
        signals.request()

    # ---- boundaries, agreement and checkpoints -------------------------------------------
    def _local_flags(self, boundary: int) -> int:
        """This worker's vote for the boundary before step ``boundary``."""
        stop_file = self.env.stop_file
        flags = STOP if signals.requested() or (stop_file is not None and stop_file.exists()) else 0
        if self.env.rank == 0 and self.store is not None:
            since = self._clock() - self._last_ckpt_clock
            if self.interval.due(boundary - self._last_ckpt_step, since, self._cost):
                flags |= CHECKPOINT
        return flags

    def _boundary(self) -> None:
        flags = self._agreed
        if flags is None:  # the step's collective did not carry the flags: one tiny all_reduce
            flags = agree(self._local_flags(self.step), self.env.world_size)
        self._agreed = None
        if flags & STOP:
            self._checkpoint()
            self._write_status("preempted", force=True)
            self._close()
            gc.freeze()  # interpreter teardown then skips collecting torch's object graph: ~1.5 s faster
            raise SystemExit(PREEMPTED_EXIT_CODE)
        if flags & CHECKPOINT and self.step > self._last_ckpt_step:
            self._checkpoint(background=self.background)

    def _checkpoint(self, background: bool = False) -> None:
        """Write one checkpoint for the whole job at the current boundary (all workers call this).

        ``background`` (periodic checkpoints): rank 0 snapshots the state to memory and writes it
        on a thread while training goes on (CheckFreq's snapshot/persist split); at most one
        write is in flight, and the next checkpoint, the stop and the exit wait for it.
        """
        if self.store is None or self.checkpoint_step == self.step:
            return
        t0 = self._clock()
        rngs = {self.env.logical_ranks[0]: rng.capture()} if self._swapper is None else self._swapper.states()
        if self.env.world_size > 1:
            parts: list[Any] = [None] * self.env.world_size if self.env.rank == 0 else []
            dist.gather_object(rngs, parts if self.env.rank == 0 else None, dst=0)
            rngs = {lr: s for part in parts for lr, s in part.items()} if self.env.rank == 0 else {}
        outcome: list[Any] = [("ok", None)]
        if self.env.rank == 0:
            try:
                self._write(rngs, background)
            except BaseException as e:
                self._broadcast([("error", f"{type(e).__name__}: {e}")])
                raise
        self._broadcast(outcome)
        status, value = outcome[0]
        if status != "ok":
            raise RuntimeError(f"stint: rank 0 failed to write the checkpoint of step {self.step}: {value}")
        cost = self._clock() - t0  # what the job was blocked for: Daly's C
        self.checkpoint_stall = cost
        self._cost = cost if self._cost is None else 0.5 * self._cost + 0.5 * cost
        self.checkpoint_step = self.step
        self._last_ckpt_clock, self._last_ckpt_step = self._clock(), self.step
        self._write_status("running", force=True)

    def _write(self, rngs: dict[int, Any], background: bool) -> None:
        """Rank 0: save the job's state (after any write still in flight)."""
        assert self.store is not None
        self._wait_for_write()
        state = {
            "tracked": {name: obj.state_dict() for name, obj in self.tracked.items()},
            "counters": self.counters,
            "rng": rngs,
        }
        meta = {
            "job_id": self.env.job_id,
            "logical_world_size": self.env.logical_world_size,
            "world_size": self.env.world_size,
            "cut_at": time.time(),  # wall clock when the cut was reached (diagnostics)
        }
        if not background:
            self.last_save = self.store.save(self.step, state, meta)
            return
        skeleton, tensors = codec.split(state)  # a private copy: training mutates the originals
        snapshot = codec.join(skeleton, [t.detach().clone() for t in tensors])
        store, step = self.store, self.step

        def persist() -> None:
            try:  # the originals tell the store what changed (frozen layers are not rewritten)
                self.last_save = store.save(step, snapshot, meta, sources=tensors)
            except Exception as e:  # noqa: BLE001 - re-raised by _wait_for_write on the training thread
                self._write_error = e

        self._in_flight = threading.Thread(target=persist, name="stint-checkpoint", daemon=True)
        self._in_flight.start()

    def _wait_for_write(self) -> None:
        if self._in_flight is not None:
            self._in_flight.join()
            self._in_flight = None
        if self._write_error is not None:
            error, self._write_error = self._write_error, None
            raise RuntimeError(f"stint: a background checkpoint write failed: {error}") from error

    def _broadcast(self, objs: list[Any]) -> None:
        if self.env.world_size > 1:
            dist.broadcast_object_list(objs, src=0)

    def _resume(self) -> None:
        found = self.store.load_latest() if self.store else None
        if found is None:
            self._broadcast_initial_state()
            return
        ckpt, state = found
        saved_l = ckpt.meta.get("logical_world_size")
        if saved_l != self.env.logical_world_size:
            raise JobEnvError(
                f"{ckpt.path}: written with {saved_l} logical ranks, but this job has "
                f"STINT_LOGICAL_WORLD_SIZE={self.env.logical_world_size}"
            )
        missing = set(self.tracked) ^ set(state["tracked"])
        if missing:
            raise JobEnvError(f"{ckpt.path}: tracked objects differ from init(): {sorted(missing)}")
        for name, obj in self.tracked.items():
            obj.load_state_dict(state["tracked"][name])
        self.counters.update(state["counters"])
        self._rng = {lr: state["rng"][lr] for lr in self.env.logical_ranks}
        self.step = self.checkpoint_step = ckpt.step
        print(f"stint: resumed {self.env.job_id} at step {ckpt.step} from {ckpt.path}", file=sys.stderr)

    # ---- processes, peers and signals ----------------------------------------------------
    def _connect(self, timeout: float) -> None:
        env = self.env
        self.placement: list[tuple[int, ...]] = [env.logical_ranks]
        if env.world_size == 1:
            return
        if not dist.is_initialized():
            if env.master_addr in ("127.0.0.1", "localhost"):
                os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # stay on loopback
            dist.init_process_group(
                "gloo",
                init_method=f"tcp://{env.master_addr}:{env.master_port}",
                rank=env.rank,
                world_size=env.world_size,
                timeout=timedelta(seconds=timeout),
            )
            self._owns_group = True
        gathered: list[Any] = [None] * env.world_size
        dist.all_gather_object(gathered, env.logical_ranks)
        self.placement = [tuple(r) for r in gathered]
        if sorted(lr for r in self.placement for lr in r) != list(range(env.logical_world_size)):
            raise JobEnvError(f"job {env.job_id}: workers' logical ranks {self.placement} do not cover 0..L-1 once")

    def _broadcast_initial_state(self) -> None:
        """At a fresh start every replica takes rank 0's parameters and buffers, as DDP does."""
        if self.env.world_size > 1:
            with torch.no_grad():
                for t in self._params + self._buffers:
                    dist.broadcast(t.data, src=0)

    def _sync_buffers(self) -> None:
        """Buffers (e.g. BatchNorm statistics) follow logical rank 0, like DDP's broadcast_buffers."""
        if self.env.world_size == 1 or not self._buffers:
            return
        owner = next(p for p, ranks in enumerate(self.placement) if 0 in ranks)
        flat = torch.cat([b.detach().reshape(-1).to(torch.float64) for b in self._buffers])
        dist.broadcast(flat, src=owner)  # float64 holds float32/16 and int64 counters exactly
        offset = 0
        with torch.no_grad():
            for b in self._buffers:
                b.copy_(flat[offset : offset + b.numel()].view_as(b))
                offset += b.numel()

    def _close(self) -> None:
        self._wait_for_write()
        signals.disarm()
        signals.reset()
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_group = False

    def _write_status(self, state: str, *, force: bool) -> None:
        path = self.env.status_file  # one file per job: rank 0 speaks for it
        now = self._clock()
        if path is None or self.env.rank != 0 or (not force and now - self._status_at < _STATUS_EVERY):
            return
        self._status_at = now
        body = {
            "state": state,
            "step": self.step,
            "checkpoint_step": self.checkpoint_step,
            "rank": self.env.rank,
            "world_size": self.env.world_size,
            "logical_world_size": self.env.logical_world_size,
        }
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, path)


def _unique(tensors: Iterator[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _copy_into(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for t, s in zip(targets, sources):
            t.copy_(s)


def init(
    *,
    seed: int = 0,
    logical_world_size: int | None = None,
    ckpt_dir: str | os.PathLike[str] | None = None,
    interval: Interval | None = None,
    keep: int = 2,
    final_checkpoint: bool = True,
    background: bool = True,
    counters: dict[str, Any] | None = None,
    **tracked: Any,
) -> Job:
    """Join the job described by the STINT_* environment and resume it if it has a checkpoint.

    Every other keyword names an object to checkpoint (model, optimizer, LR scheduler,
    GradScaler: anything with ``state_dict``/``load_state_dict``). ``counters`` are picklable user
    values kept in ``job.counters``. ``logical_world_size`` and ``ckpt_dir`` apply when the
    environment does not set them (running by hand); without a checkpoint directory the job
    runs but neither checkpoints nor intercepts signals. ``background``: periodic checkpoints
    are written on a thread from an in-memory snapshot (preemption and final ones never are).
    """
    env = read_env(logical_world_size=logical_world_size, ckpt_dir=ckpt_dir)
    return Job(env, tracked, seed=seed, interval=interval, keep=keep,
               final_checkpoint=final_checkpoint, background=background, counters=counters)
