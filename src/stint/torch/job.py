"""The Job: a training loop's handle on checkpoints, preemption and elastic logical ranks.

Typical use, epoch style with a DataLoader::

    import stint.torch as stint
    job = stint.init(model=model, optimizer=opt, scheduler=sched)
    loader = job.loader(dataset, batch_size=64, shuffle=True, num_workers=2)
    for epoch in job.epochs(n_epochs):
        for batch in loader:                    # one step
            opt.zero_grad()
            losses = [loss_fn(model(x), y) for x, y in batch]   # one micro-batch per hosted rank
            opt.step(); sched.step()

or step style: ``for step in job.steps(total): ... for idx in job.batches(sampler): ...``.

At every step boundary the workers agree (on the step's own collective) whether to stop or to
checkpoint; on a stop request (SIGUSR1 or SIGTERM) they write one checkpoint for the whole job
and exit with code 75. On start the job resumes from the newest valid checkpoint.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

from stint.torch import guards, rng, signals
from stint.torch.env import JobEnv, JobEnvError, read_env
from stint.torch.exchange import CHECKPOINT, STOP, Exchange, agree, gather
from stint.torch.guards import DivergenceError
from stint.torch.interval import Interval
from stint.torch.loader import Loader, StepBatch, dataloader_options
from stint.torch.options import EXCHANGES, JobOptions
from stint.torch.peers import GroupPeers
from stint.torch.sampler import Sampler
from stint.torch.sharded import Sharded
from stint.torch.store import CheckpointStore, SaveStats

T = TypeVar("T")

PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL: "stopped cleanly at a checkpoint, resume me"
_STATUS_EVERY = 1.0  # seconds between status-file updates


class Job:
    """One worker's handle on its job. Build it with :func:`init`."""

    def __init__(
        self,
        env: JobEnv,
        tracked: dict[str, Any],
        options: JobOptions,
        *,
        counters: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 300.0,
    ) -> None:
        for name, obj in tracked.items():
            if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
                raise TypeError(f"stint.init: {name}={type(obj).__name__} has no state_dict/load_state_dict")
        self.options = options
        self.env = env
        self.tracked = tracked
        self.counters: dict[str, Any] = counters if counters is not None else {}  # the user's own dict
        self._rank_counters = {lr: copy.deepcopy(options.rank_counters) for lr in env.logical_ranks}
        self._current: int | None = None  # the logical rank whose micro-batch runs now
        self._counters_warned = False
        self._ended_counters: dict[int, dict[str, Any]] | None = None  # every rank's, once the loop ended
        self.step = 0
        self.store = CheckpointStore(env.ckpt_dir, keep=options.keep) if env.ckpt_dir else None
        self.last_save: SaveStats | None = None
        self.checkpoint_stall: float | None = None  # seconds the last checkpoint blocked training
        self._in_flight: threading.Thread | None = None
        self._staging: dict[int, torch.Tensor] = {}  # the last background snapshot's items, reused
        self._peers: GroupPeers | None = None  # the workers sharing each checkpoint's write
        self._write_error: BaseException | None = None
        self.checkpoint_step: int | None = None
        self._clock = clock
        self._agreed: int | None = None
        self._owns_group = False
        self._status_at = -_STATUS_EVERY
        self._cost: float | None = None
        self._loader: Loader | None = None
        self._total: int | None = None
        self._reduced_step = -1  # the last step whose micro-batch loop ran to its end
        self._left_early: int | None = None  # a step whose micro-batch loop was broken out of
        self._grads_pending = False  # reduced gradients no optimizer has stepped on yet
        self._checked: set[int] = set()
        self._sharded_ids: set[int] = set()  # shard=True: the blocks the optimizers step on
        self._optimizers = {id(o): n for n, o in tracked.items() if isinstance(o, torch.optim.Optimizer)}
        self._modules = {n: m for n, m in tracked.items() if isinstance(m, torch.nn.Module)}
        self._params = _unique(p for m in self._modules.values() for p in m.parameters() if p.requires_grad)
        self._buffers = _unique(b for m in self._modules.values() for b in m.buffers())
        self._device = self._params[0].device if self._params else torch.device("cpu")
        self._connect(timeout)
        self._rng = {lr: rng.seed_states(options.seed, lr) for lr in env.logical_ranks}
        self._sharded = self._shard() if options.shard else None
        self._exchange = (Exchange(self._params, self.placement, sharded=EXCHANGES[options.exchange])
                          if env.logical_world_size > 1 and self._sharded is None else None)
        self._resume()
        self._swapper = rng.Swapper(self._rng)
        self._last_ckpt_clock, self._last_ckpt_step = clock(), self.step
        if self.store:
            signals.arm()
        guards.observe(self)

    def _shard(self) -> Sharded:
        """shard=True: the one tracked module's parameters, gradients and optimizer state
        sharded by logical rank (stint.torch.sharded); its optimizers rebound to the blocks."""
        if len(self._modules) != 1:
            raise ValueError(f"stint.init: shard=True needs exactly one tracked module, got {sorted(self._modules)}")
        (model,) = self._modules.values()
        engine = Sharded(model, self.placement, self.env.rank)
        for o in self.tracked.values():
            if isinstance(o, torch.optim.Optimizer):
                engine.bind(o, lambda p: True)
        self._sharded_ids = {id(b) for b in engine.blocks()}
        self._params = []  # the engine reduces the gradients, into the blocks
        return engine

    # ---- the training loop's API ---------------------------------------------------------
    @property
    def logical_world_size(self) -> int:
        return self.env.logical_world_size

    @property
    def exchange(self) -> str:
        """How gradients travel: "none" (L = 1 or P = 1), "gathered" or "sharded" (stint.torch.exchange)."""
        if self._exchange is None or self.env.world_size == 1:
            return "none"
        return "sharded" if self._exchange.sharded else "gathered"

    @property
    def is_main(self) -> bool:
        """Whether this worker speaks for the job (rank 0): log and write files from it only."""
        return self.env.rank == 0

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main worker only: a line once per job, not once per worker."""
        if self.is_main:
            print(*args, **kwargs, flush=True)

    def steps(self, total: int) -> Iterator[int]:
        """Yield the steps still to run, from the resumed one to ``total - 1``.

        At each boundary: stop (checkpoint, exit 75) or checkpoint if the workers agreed so.
        After the last step: a final checkpoint (unless disabled) and a normal return.
        """
        self._total = total
        yield from self._advance(total)
        self._finish()

    def loader(self, dataset: Any, batch_size: int, *, shuffle: bool = True, seed: int | None = None,
               num_workers: int = 0, collate_fn: Callable[[list[Any]], Any] | None = None,
               pin_memory: bool = False, **dataloader_args: Any) -> Loader:
        """The job's training DataLoader over ``dataset`` (map-style); ``batch_size`` is the global
        batch, split evenly over the L logical ranks. ``seed`` defaults to the job's (or a
        ``generator``'s initial seed). See :mod:`stint.torch.loader`: every other DataLoader keyword
        is passed on or refused naming it (``sampler``, ``batch_sampler``, ``drop_last=False``,
        ``in_order=False``)."""
        if self._loader is not None:
            raise RuntimeError("job.loader: the job has its training loader already (one per job; "
                               "use a plain DataLoader for evaluation)")
        passed, seed = dataloader_options(dataloader_args, seed)
        self._loader = Loader(self, dataset, batch_size, shuffle=shuffle,
                              seed=self.options.seed if seed is None else seed, num_workers=num_workers,
                              collate_fn=collate_fn, pin_memory=pin_memory, **passed)
        return self._loader

    def epochs(self, n: int) -> Iterator[int]:
        """Yield the epochs still to run (from the resumed one); iterate the job's loader in each.

        A job resumed mid-epoch yields that epoch, and the loader continues it where it stopped.
        """
        loader = self._loader
        if loader is None:
            raise RuntimeError("job.epochs: create the job's loader first (loader = job.loader(dataset, ...))")
        per_epoch = len(loader)
        self._total = n * per_epoch
        while self.step < self._total:
            epoch = self.step // per_epoch
            yield epoch
            if self.step // per_epoch == epoch:
                raise RuntimeError(f"job.epochs: epoch {epoch} ended at step {self.step}, before its "
                                   f"last step; iterate the job's loader (all of it) in every epoch")
        self._finish()

    def epoch_steps(self, loader: Loader) -> Iterator[StepBatch]:
        """What ``iter(loader)`` is: the rest of the current epoch, one StepBatch per step."""
        if self._total is None:
            raise RuntimeError("iterate the job's loader inside `for epoch in job.epochs(n):`")
        end = min(self._total, (self.step // len(loader) + 1) * len(loader))
        for step in self._advance(end):
            yield StepBatch(self, loader.fetch(step))

    def logical_ranks(self) -> Iterator[int]:
        """Yield each logical rank this worker hosts; run one micro-batch (forward+backward) per rank.

        When the loop ends, every parameter's ``.grad`` is the mean of the L logical ranks'
        gradients, summed in logical-rank order (bitwise independent of the number of workers);
        gradients that were there before the loop (accumulation across steps) are kept and the mean added to them.
        """
        return self.micro_batches(list(self.env.logical_ranks))

    def batches(self, data: Sampler | Loader) -> Iterator[Any]:
        """Like :meth:`logical_ranks`, yielding each hosted logical rank's share of the global batch:
        its indices (a Sampler) or its collated micro-batch (the job's Loader, step-style loops)."""
        if isinstance(data, Loader):
            return self.micro_batches(data.fetch(self.step))
        lws = self.env.logical_world_size
        return self.micro_batches([data.shard(self.step, lr, lws) for lr in self.env.logical_ranks])

    @property
    def rank_counters(self) -> dict[str, Any]:
        """The current logical rank's own counters (inside the micro-batch loop): a copy of
        ``init(rank_counters=...)`` per logical rank, saved and restored per logical rank, so a
        count made in the loop is the same on any P (``counters`` is worker 0's dict only)."""
        if self._current is None:
            raise RuntimeError("job.rank_counters: a logical rank's counters exist inside the micro-batch "
                               "loop only (job.batches(), job.logical_ranks(), the loader's step batch); "
                               "use job.rank_counters_total(name) outside it")
        return self._rank_counters[self._current]

    def rank_counters_total(self, name: str) -> Any:
        """The sum of rank counter ``name`` over the L logical ranks: ``rank_counters_reduce(name, "sum")``."""
        return self.rank_counters_reduce(name, "sum")

    def rank_counters_reduce(self, name: str, how: str = "sum") -> Any:
        """Rank counter ``name`` reduced over the L logical ranks: ``how`` is "sum" (in logical-rank
        order), "mean" (that sum / L), "max" or "min" (numbers, or tensors element-wise). Each
        logical rank's value is the same for any P, and so is the result, bit for bit. Collective
        while the loop runs (every worker calls it at the same point); after the loop it reads
        the values gathered when it ended."""
        if name not in self.options.rank_counters:
            raise KeyError(f"job.rank_counters_reduce: {name!r} is not one of init(rank_counters=...)'s "
                           f"names {sorted(self.options.rank_counters)}")
        if how not in RANK_REDUCTIONS:
            raise ValueError(f"job.rank_counters_reduce: how={how!r} must be one of {list(RANK_REDUCTIONS)}")
        every = self._all_rank_counters()
        return reduce_in_rank_order([every[lr][name] for lr in range(self.env.logical_world_size)], how)

    def _all_rank_counters(self) -> dict[int, dict[str, Any]]:
        if self._ended_counters is not None:
            return self._ended_counters
        if self.env.world_size == 1:
            return self._rank_counters
        parts: list[Any] = [None] * self.env.world_size
        dist.all_gather_object(parts, self._rank_counters)
        return {lr: c for part in parts for lr, c in part.items()}

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` over the job's parameters, after the micro-batch loop;
        with shard=True over the blocks, the norm the same bits on any P (a collective then)."""
        if self._sharded is not None:
            return self._sharded.clip_grad_norm_(max_norm)
        params = [p for m in self._modules.values() for p in m.parameters()]
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    @property
    def peak_sharded_bytes(self) -> int:
        """shard=True: the most parameter + optimizer-state bytes this worker held at once (its
        blocks, their optimizer state, the units gathered whole); 0 otherwise."""
        return self._sharded.peak_bytes if self._sharded is not None else 0

    def wait_for_checkpoint(self) -> None:
        """Block until a background checkpoint write in flight is on disk (raises if it failed)."""
        self._wait_for_write()

    def request_stop(self) -> None:
        """Ask the job to checkpoint and exit with code 75 at the next step boundary (what SIGUSR1 does)."""
        signals.request()

    def all_reduce_mean(self, values: Any) -> torch.Tensor:
        """The mean over the L logical ranks of a per-rank value (a loss, a metric).

        ``values``: one value (number or tensor) per hosted logical rank, in the order the
        micro-batch loop yields them, or a single value when this worker hosts one rank. Summed
        in logical-rank order: the same bits on every worker and for every P. Collective: every
        worker must call it at the same point.
        """
        hosted = self.env.logical_ranks
        items = list(values) if isinstance(values, (list, tuple)) else [values]
        if len(items) != len(hosted):
            raise ValueError(f"job.all_reduce_mean: {len(items)} values for the {len(hosted)} logical "
                             "ranks this worker hosts; pass one per micro-batch (e.g. a list of losses)")
        mine = torch.stack([torch.as_tensor(v).detach().to(self._device, torch.float64) for v in items])
        if self.env.world_size > 1:
            rows = gather(mine, self.env.world_size)
            by_rank = {lr: rows[w, j] for w, ranks in enumerate(self.placement) for j, lr in enumerate(ranks)}
        else:
            by_rank = {lr: mine[j] for j, lr in enumerate(hosted)}
        total = by_rank[0].clone()
        for lr in range(1, self.env.logical_world_size):
            total.add_(by_rank[lr])
        return total.div_(self.env.logical_world_size)

    # ---- the micro-batch loop ------------------------------------------------------------
    def micro_batches(self, items: Sequence[T]) -> Iterator[T]:
        """Yield ``items[i]`` as hosted logical rank i's micro-batch, with that rank's generators
        and the step's buffers live; reduce the gradients when the loop ends."""
        self._check_loop_ended()
        hosted = self.env.logical_ranks
        carry = self._take_carry() if self._exchange is not None else None
        if self._exchange is not None:
            self._exchange.start_step(reuse=carry is None)
        block_carry = self._sharded.start_step() if self._sharded is not None else []
        swap, sliced = self._swapper, len(hosted) > 1
        before = [b.clone() for b in self._buffers] if sliced else []
        counted = dict(self.counters) if self.counters and not self._counters_warned else None
        after0: list[torch.Tensor] = []
        for slot, (lr, item) in enumerate(zip(hosted, items, strict=True)):
            swap.enter(lr)
            if slot:
                _copy_into(self._buffers, before)
            self._current = lr
            try:
                yield item
            except GeneratorExit:
                self._left_early = self.step
                raise
            finally:
                self._current = None
            swap.leave(lr)
            if lr == 0 and sliced:
                after0 = [b.clone() for b in self._buffers]
            if self._exchange is not None:
                self._exchange.take(lr)
            if self._sharded is not None:
                self._sharded.take()
        if after0:
            _copy_into(self._buffers, after0)
        if counted is not None and counted != self.counters:
            self._warn_counted_in_loop(counted)
        # Draws after the loop (before the optimizer step, user code) come from the job's outside
        # stream again, not from the last hosted rank's: the same for every P and placement.
        rng.seed_after_loop(self.options.seed, self.step)
        swap.reseeded()
        if self._exchange is not None:
            self._agreed = self._exchange.reduce(self._local_flags(self.step + 1))
            self._add_carry(carry)
            self._sync_buffers()
        if self._sharded is not None:
            self._sharded.reduce(block_carry)
            self._sync_buffers()
        self._reduced_step = self.step
        self._grads_pending = True

    def _warn_counted_in_loop(self, before: dict[str, Any]) -> None:
        """Once per job: ``counters`` changed inside the micro-batch loop, so they count this
        worker's share of the logical ranks (a value that depends on P)."""
        self._counters_warned = True
        key = next(k for k in set(before) | set(self.counters) if before.get(k) != self.counters.get(k))
        if self.is_main:
            _warn(f"counters[{key!r}] changed inside the micro-batch loop: it counts this worker's "
                  f"{len(self.env.logical_ranks)} of the {self.env.logical_world_size} logical ranks, so "
                  "its value depends on the number of workers (only worker 0's counters are saved). "
                  "Count per logical rank with init(rank_counters=...) and job.rank_counters.")

    def _take_carry(self) -> list[torch.Tensor | None] | None:
        """Gradients accumulated by earlier steps (identical on every worker): set aside, added back."""
        if all(p.grad is None for p in self._params):
            return None
        carry = [p.grad for p in self._params]
        for p in self._params:
            p.grad = None
        return carry

    def _add_carry(self, carry: list[torch.Tensor | None] | None) -> None:
        if carry is None:
            return
        for p, old in zip(self._params, carry):
            if old is not None:
                p.grad = old if p.grad is None else old.add_(p.grad)

    def _check_loop_ended(self) -> None:
        if self._left_early is not None:
            step, self._left_early = self._left_early, None
            raise DivergenceError(
                f"stint: the micro-batch loop (job.batches() / the loader's step batch) of step {step} "
                "was left early (break or return): its gradients were not reduced over the logical "
                "ranks and the replicas would diverge. Run every micro-batch of each step.")

    # ---- optimizer hooks (stint.torch.guards) --------------------------------------------
    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        name = self._optimizers.get(id(optimizer))
        if name is None and not self._updates_tracked(optimizer):
            return  # another model's optimizer in the same process: none of this job's business
        if name is None:
            raise DivergenceError(
                f"stint: an optimizer ({type(optimizer).__name__}) that was not passed to init() "
                f"stepped at step {self.step}: its state would not be checkpointed and a resumed run "
                "would diverge. Pass it to init(), e.g. init(..., optimizer2=opt2).")
        if id(optimizer) not in self._checked:
            self._check_optimizer(name, optimizer)
            self._checked.add(id(optimizer))
        self._check_loop_ended()
        if (self._exchange is not None or self._sharded is not None) and self._reduced_step != self.step:
            raise DivergenceError(
                f"stint: optimizer '{name}' stepped at step {self.step} on gradients that were not "
                "reduced over the logical ranks: run forward and backward inside job.batches(), "
                "job.logical_ranks() or the loader's step batch, once per micro-batch.")

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if id(optimizer) in self._optimizers:
            self._grads_pending = False

    def _updates_tracked(self, optimizer: torch.optim.Optimizer) -> bool:
        owned = {id(p) for m in self._modules.values() for p in m.parameters()} | self._sharded_ids
        return any(id(p) in owned for group in optimizer.param_groups for p in group["params"])

    def _check_optimizer(self, name: str, optimizer: torch.optim.Optimizer) -> None:
        """Every parameter it updates belongs to a tracked module (and is reduced); its LR
        scheduler, if any, is tracked too."""
        owned = {id(p) for m in self._modules.values() for p in m.parameters()} | self._sharded_ids
        reduced = {id(p) for p in self._params} | self._sharded_ids
        for g, group in enumerate(optimizer.param_groups):
            for i, p in enumerate(group["params"]):
                where = f"optimizer '{name}' (param group {g}, parameter {i}, shape {tuple(p.shape)})"
                if id(p) not in owned:
                    raise DivergenceError(
                        f"stint: {where} belongs to no module passed to init(): it is neither reduced "
                        "over the logical ranks nor checkpointed. Pass its module to init(), e.g. "
                        "init(model=model, head=head, ...).")
                if self._exchange is not None and p.requires_grad and id(p) not in reduced:
                    raise DivergenceError(
                        f"stint: {where} was frozen when init() ran and requires grad now: its "
                        "gradients are not reduced. Set requires_grad before init().")
            if "initial_lr" in group and not any(
                    getattr(o, "optimizer", None) is optimizer for o in self.tracked.values()):
                raise DivergenceError(
                    f"stint: optimizer '{name}' has an LR scheduler that was not passed to init(): "
                    "its position would not be checkpointed. Pass it, e.g. init(..., scheduler=sched).")

    # ---- boundaries, agreement and checkpoints -------------------------------------------
    def _advance(self, end: int) -> Iterator[int]:
        """Run the boundaries of the steps up to ``end`` (exclusive), yielding each step."""
        while self.step < end:
            self._boundary()
            rng.seed_outside(self.options.seed, self.step)
            self._swapper.reseeded()
            yield self.step
            self._check_loop_ended()
            self.step += 1
            self._write_status("running", force=False)

    def _finish(self) -> None:
        if self._sharded is not None:
            self._finish_sharded()
            return
        if self.options.rank_counters:
            self._ended_counters = self._all_rank_counters()  # for the epilogue, the group closes now
        if self.options.final_checkpoint:
            self._checkpoint_agreed()
        elif self.options.check_every is not None:
            self.check_replicas()
        self._write_status("finished", force=True)
        self._close(finished=True)

    def _finish_sharded(self) -> None:
        if self.options.rank_counters:
            self._ended_counters = self._all_rank_counters()
        if self.options.final_checkpoint:
            self._checkpoint_agreed()
        elif self.options.check_every is not None:
            self.check_replicas()
        assert self._sharded is not None
        self._sharded.unshard()  # the epilogue gets the whole model (collective: before the group closes)
        self._write_status("finished", force=True)
        self._close(finished=True)

    def _local_flags(self, boundary: int) -> int:
        """This worker's vote for the boundary before step ``boundary``."""
        stop_file = self.env.stop_file
        flags = STOP if signals.requested() or (stop_file is not None and stop_file.exists()) else 0
        if self.env.rank == 0 and self.store is not None:
            since = self._clock() - self._last_ckpt_clock
            if self.options.interval.due(boundary - self._last_ckpt_step, since, self._cost):
                flags |= CHECKPOINT
        return flags

    def _boundary(self) -> None:
        flags = self._agreed
        if flags is None:  # the step's collective did not carry the flags: one tiny all_reduce
            flags = agree(self._local_flags(self.step), self.env.world_size, self._device)
        self._agreed = None
        checkpoint = bool(flags & STOP) or (bool(flags & CHECKPOINT) and self.step > self._last_ckpt_step)
        if flags & STOP:
            self._checkpoint_agreed()
            self._write_status("preempted", force=True)
            self._close()
            gc.freeze()  # interpreter teardown then skips collecting torch's object graph: ~1.5 s faster
            raise SystemExit(PREEMPTED_EXIT_CODE)
        if checkpoint:
            self._checkpoint_agreed(background=self.options.background)
        elif self.options.check_every is not None and self.step % self.options.check_every == 0:
            self.check_replicas()

    def check_replicas(self) -> None:
        """Compare every worker's parameters, buffers and optimizer state bit for bit (a checksum
        per tensor, one small all_gather); raise DivergenceError naming the first that differs.
        Done at every checkpoint (the final one included) and every ``check_every`` steps; collective."""
        found = self._divergence()
        if found is not None:
            raise DivergenceError(found.message + _DIVERGENCE_HINT)

    def _divergence(self) -> Divergence | None:
        """What differs between the workers' replicas now (None: they agree); collective."""
        if self.env.world_size == 1:
            return None
        named = self._named_state()
        mine = guards.checksums([t for _, t in named]).to(self._device)
        rows = gather(mine, self.env.world_size).cpu()
        differs = (rows != rows[0]).any(dim=0).nonzero().flatten().tolist()
        if not differs:
            return None
        first = differs[0]
        workers = [w for w in range(self.env.world_size) if rows[w, first] != rows[0, first]]
        names = [named[i][0] for i in differs]
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        message = (f"stint: the replicas diverged before step {self.step}: {names[0]} differs between "
                   f"worker 0 and worker(s) {workers} ({len(differs)} tensor(s) differ: {shown}). ")
        return Divergence(message, [named[i][1] for i in differs], _majority(rows))

    def _checkpoint_agreed(self, background: bool = False) -> None:
        """A checkpoint of state every worker agrees on (all workers call this).

        The replicas are compared first (unless ``check_every`` is None). If they differ and a
        strict majority of workers agree, every worker takes the majority's copy of the tensors
        that differ and that state is checkpointed; with no majority nothing is written and the
        last checkpoint stays the newest. Either way the job then fails with DivergenceError
        naming the tensors: the executor restarts it from the last agreed state.
        """
        found = self._divergence() if self.options.check_every is not None else None
        if found is None:
            self._checkpoint(background=background)
            return
        self._wait_for_write()  # the last agreed checkpoint, if still being written, is made durable
        if found.majority and self.store is not None:
            self._adopt(found.tensors, src=found.majority[0])
            self._checkpoint()
            kept = (f"the checkpoint of step {self.step} holds the state of the majority, worker(s) "
                    f"{found.majority}.")
        elif self.checkpoint_step is not None:
            kept = f"no checkpoint was written: step {self.checkpoint_step}'s is the last agreed state."
        else:
            kept = "no checkpoint was written (no majority, or no checkpoint directory)."
        self._close()
        raise DivergenceError(found.message + kept + _DIVERGENCE_HINT)

    def _adopt(self, tensors: list[torch.Tensor], src: int) -> None:
        """Every worker takes worker ``src``'s copy of ``tensors`` (in place)."""
        with torch.no_grad():
            for t in tensors:
                dist.broadcast(t, src=src)

    def _named_state(self) -> list[tuple[str, torch.Tensor]]:
        if self._sharded is not None:  # parameters and optimizer state are shards, not replicas
            return [(f"{n}.{k}", b) for n, m in self._modules.items() for k, b in m.named_buffers()]
        named = [(f"{n}.{k}", t) for n, m in self._modules.items() for k, t in m.state_dict().items()
                 if isinstance(t, torch.Tensor)]
        for n, o in self.tracked.items():
            if isinstance(o, torch.optim.Optimizer):
                for i, per_param in enumerate(o.state.values()):
                    named += [(f"{n}.state[{i}].{k}", t) for k, t in per_param.items()
                              if isinstance(t, torch.Tensor)]
        return named

    def _checkpoint(self, background: bool = False) -> None:
        """Write one checkpoint for the whole job at the current boundary (all workers call this).

        Every worker writes its share of the state (stint.torch.store: items dealt by bytes);
        worker 0 commits the checkpoint once all shares are durable. ``background`` (periodic
        checkpoints): each worker snapshots its share to memory and writes it on a thread while
        training goes on (CheckFreq's snapshot/persist split); at most one write is in flight,
        and the next checkpoint, the stop and the exit wait for it.
        """
        if self.store is None or self.checkpoint_step == self.step:
            return
        t0 = self._clock()
        rngs, ranks = self._swapper.states(), self._rank_counters
        if self.env.world_size > 1:
            parts: list[Any] = [None] * self.env.world_size if self.env.rank == 0 else []
            dist.gather_object((rngs, ranks, self.counters), parts if self.env.rank == 0 else None, dst=0)
            rngs = {lr: s for part in parts for lr, s in part[0].items()} if self.env.rank == 0 else {}
            ranks = {lr: c for part in parts for lr, c in part[1].items()} if self.env.rank == 0 else {}
            if self.env.rank == 0:
                self._warn_counters([part[2] for part in parts])
        self._write(rngs, ranks, background)
        cost = self._clock() - t0  # what the job was blocked for: Daly's C
        self.checkpoint_stall = cost
        self._cost = cost if self._cost is None else 0.5 * self._cost + 0.5 * cost
        self.checkpoint_step = self.step
        self._last_ckpt_clock, self._last_ckpt_step = self._clock(), self.step
        self._write_status("running", force=True)

    def _warn_counters(self, every: list[dict[str, Any]]) -> None:
        """Warn (once per job) when a worker's ``counters`` differ from worker 0's: only worker
        0's are saved, so such a count (e.g. one made in the micro-batch loop) would depend on P."""
        if self._counters_warned:
            return
        for w, theirs in enumerate(every):
            differs = sorted(k for k in set(every[0]) | set(theirs) if every[0].get(k) != theirs.get(k))
            if differs:
                self._counters_warned = True
                k = differs[0]
                _warn(f"counters[{k!r}] differs between workers (worker 0: {every[0].get(k)!r}, worker {w}: "
                      f"{theirs.get(k)!r}): only worker 0's counters are saved. Count per logical rank "
                      "with init(rank_counters=...) and job.rank_counters inside the micro-batch loop.")
                return

    def _write(self, rngs: dict[int, Any], ranks: dict[int, dict[str, Any]], background: bool) -> None:
        """This worker's share of the job's state (after any write still in flight)."""
        assert self.store is not None
        self._wait_for_write()
        state: dict[str, Any] = {"tracked": {name: self._state_dict(obj) for name, obj in self.tracked.items()}}
        owners: dict[int, int] | None = None
        if self._sharded is not None:
            optimizer = self._sharded_optimizer()
            state["sharded"], owners = self._sharded.state(optimizer, self._grads_pending)
            state["sharded"]["model"] = next(iter(self._modules))
            state["sharded"]["optimizer"] = next((n for n, o in self.tracked.items() if o is optimizer), None)
        if self._grads_pending:  # accumulation across steps: the gradients are part of the state
            state["grads"] = [p.grad for p in self._params]
        # What worker 0 alone holds (the user's counters, every logical rank's RNG state).
        private = ({"counters": self.counters, "rng": rngs, "rank_counters": ranks,
                    "param_names": self._param_names()} if self.is_main else None)
        meta = {
            "job_id": self.env.job_id,
            "logical_world_size": self.env.logical_world_size,
            "world_size": self.env.world_size,
            "settings": guards.settings(),
            "cut_at": time.time(),  # wall clock when the cut was reached (diagnostics)
        }
        store, step, peers = self.store, self.step, self._peers
        cut = _without_gc(lambda: store.cut(state, private, writers=self.env.world_size, owners=owners))
        if not background:
            self.last_save = store.write(step, cut, meta, peers)
            return
        # A private copy of this worker's share: training mutates the originals. The copies go
        # into the buffers of the last snapshot (its write is done by now): a memcpy, no page faults.
        # The cut and the copy make tens of thousands of small objects with many small tensors: no
        # garbage collection meanwhile (a full one costs 0.3 s with torch loaded: benchmarks/RESULTS.md).
        snapshot = _without_gc(lambda: cut.staged(self.env.rank, self._staging))

        def persist() -> None:
            try:  # the cut's keys, from the originals, tell what changed (frozen layers are not rewritten)
                self.last_save = store.write(step, snapshot, meta, peers)
            except Exception as e:  # noqa: BLE001 - re-raised by _wait_for_write on the training thread
                self._write_error = e

        self._in_flight = threading.Thread(target=persist, name="stint-checkpoint", daemon=True)
        self._in_flight.start()

    def _state_dict(self, obj: Any) -> Any:
        """What is saved of a tracked object: its state dict, but with shard=True the model's
        buffers only and a mark for its optimizer (their shards are saved by the engine)."""
        if self._sharded is None:
            return obj.state_dict()
        if isinstance(obj, torch.optim.Optimizer):
            return {"sharded": True}
        if isinstance(obj, torch.nn.Module):
            params = {n for n, _ in obj.named_parameters()}
            return {k: v for k, v in obj.state_dict().items() if k not in params}
        return obj.state_dict()

    def _sharded_optimizer(self) -> torch.optim.Optimizer | None:
        found = [o for o in self.tracked.values() if isinstance(o, torch.optim.Optimizer)]
        if len(found) > 1:
            raise ValueError("stint: shard=True supports one optimizer")
        return found[0] if found else None

    def _param_names(self) -> dict[str, list[str]]:
        """Each tracked optimizer's parameters by name, in its state dict's order: the names
        DCP's optimizer state dicts use (``stint.export_dcp``). Parameters of one tracked module
        are named as in it; of several, ``"<init keyword>.<name>"`` (as an ``nn.ModuleDict`` of
        the tracked modules names them)."""
        named = {id(p): (m, n) for m, module in self._modules.items() for n, p in module.named_parameters()}
        out: dict[str, list[str]] = {}
        if self._sharded is not None:
            return out
        for name, o in self.tracked.items():
            if isinstance(o, torch.optim.Optimizer):
                where = [named.get(id(p), ("?", "?")) for g in o.param_groups for p in g["params"]]
                one = len({m for m, _ in where}) == 1
                out[name] = [n if one else f"{m}.{n}" for m, n in where]
        return out

    def _wait_for_write(self) -> None:
        if self._in_flight is not None:
            self._in_flight.join()
            self._in_flight = None
        if self._write_error is not None:
            error, self._write_error = self._write_error, None
            raise RuntimeError(f"stint: a background checkpoint write failed: {error}") from error

    def _resume(self) -> None:
        found = self.store.load_latest(report=self.is_main) if self.store else None
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
            if self._sharded is None:
                obj.load_state_dict(state["tracked"][name])
            elif isinstance(obj, torch.nn.Module):
                obj.load_state_dict(state["tracked"][name], strict=False)  # buffers: the shards follow
            elif not isinstance(obj, torch.optim.Optimizer):
                obj.load_state_dict(state["tracked"][name])
        if self._sharded is not None:
            if "sharded" not in state:
                raise JobEnvError(f"{ckpt.path}: written without shard=True; this job shards its model")
            self._sharded.load(state["sharded"], self._sharded_optimizer())
        self.counters.update(state["counters"])
        saved = state.get("rank_counters") or {}
        start = self.options.rank_counters
        self._rank_counters = {lr: dict(start, **saved.get(lr, {})) for lr in self.env.logical_ranks}
        for p, g in zip(self._params, state.get("grads") or [], strict=False):
            p.grad = None if g is None else g.to(p.device)
        self._grads_pending = "grads" in state
        self._rng = {lr: state["rng"][lr] for lr in self.env.logical_ranks}
        self.step = self.checkpoint_step = ckpt.step
        if self.is_main:
            print(f"stint: resumed {self.env.job_id} at step {ckpt.step} from {ckpt.path}", file=sys.stderr)
            changed = guards.differences(ckpt.meta.get("settings", {}), guards.settings())
            if changed:
                _warn(f"{ckpt.path} was written with other settings that change results ("
                      + "; ".join(changed) + "): the resumed run will not be bitwise identical")

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
                backend_for(self._device),
                store=rendezvous_store(env.master_addr, env.master_port, env.world_size,
                                       env.rank == 0, timeout),
                rank=env.rank,
                world_size=env.world_size,
                timeout=timedelta(seconds=timeout),
            )
            self._owns_group = True
        gathered: list[Any] = [None] * env.world_size
        dist.all_gather_object(gathered, (env.logical_ranks, guards.settings()))
        self.placement = [tuple(r) for r, _ in gathered]
        if self.store is not None:
            self._peers = GroupPeers(env.rank, env.world_size, timeout)
        if sorted(lr for r in self.placement for lr in r) != list(range(env.logical_world_size)):
            raise JobEnvError(f"job {env.job_id}: workers' logical ranks {self.placement} do not cover 0..L-1 once")
        for w, (_, theirs) in enumerate(gathered):
            changed = guards.differences(gathered[0][1], theirs)
            if changed and self.is_main:
                _warn(f"worker {w} runs with other settings than worker 0 ({'; '.join(changed)}): "
                      "results will depend on which worker hosts which logical rank")

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

    def _close(self, finished: bool = False) -> None:
        """Release the job's threads, loader and groups. ``finished`` (the training loop ended):
        the stop handlers stay armed, so a stop that lands in the epilogue is not fatal."""
        self._wait_for_write()
        if self._loader is not None:
            self._loader.close()
        guards.observe(None)
        if finished:
            signals.finished(speak=self.is_main)
        else:
            signals.disarm()
            signals.reset()
        if self._peers is not None:
            self._peers.close()
            self._peers = None
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
            "total_steps": self._total,  # the loop's last step + 1, once known (None before)
            "checkpoint_step": self.checkpoint_step,
            "rank": self.env.rank,
            "world_size": self.env.world_size,
            "logical_world_size": self.env.logical_world_size,
        }
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body))
        os.replace(tmp, path)


_DIVERGENCE_HINT = (" Something changed state outside the micro-batch loop on some workers only, or ran "
                    "with other settings.")


@dataclass(frozen=True)
class Divergence:
    """Replicas that differ: the message naming what differs, those tensors (this worker's
    copies, in the order compared), and the workers of the strict majority that agree (or [])."""

    message: str
    tensors: list[torch.Tensor]
    majority: list[int]


def _majority(rows: torch.Tensor) -> list[int]:
    """The workers whose checksum rows agree with more than half of the workers' (or [])."""
    keys = [tuple(r.tolist()) for r in rows]
    for key in dict.fromkeys(keys):
        agreeing = [w for w, k in enumerate(keys) if k == key]
        if 2 * len(agreeing) > len(keys):
            return agreeing
    return []


RANK_REDUCTIONS = ("sum", "mean", "max", "min")


def reduce_in_rank_order(values: Sequence[Any], how: str) -> Any:
    """``values`` (one per logical rank, in rank order) reduced by ``how`` (RANK_REDUCTIONS),
    folded left to right: the same bits whatever the number of workers."""
    out = values[0]
    for v in values[1:]:
        if how in ("sum", "mean"):
            out = out + v
        elif isinstance(out, torch.Tensor) or isinstance(v, torch.Tensor):
            pick = torch.maximum if how == "max" else torch.minimum
            out = pick(torch.as_tensor(out), torch.as_tensor(v))
        else:
            out = max(out, v) if how == "max" else min(out, v)
    return out / len(values) if how == "mean" else out


def backend_for(device: torch.device) -> str:
    """The process-group backend for a job whose parameters live on ``device``: NCCL for CUDA
    tensors (gloo beside it for CPU ones), gloo on the CPU."""
    if device.type == "cuda" and dist.is_nccl_available():
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def _warn(message: str) -> None:
    print(f"stint: warning: {message}", file=sys.stderr)
    warnings.warn(f"stint: {message}", stacklevel=3)


def _unique(tensors: Iterator[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _without_gc(work: Callable[[], T]) -> T:
    """``work()`` with the garbage collector paused (if it was running)."""
    running = gc.isenabled()
    gc.disable()
    try:
        return work()
    finally:
        if running:
            gc.enable()


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
    rank_counters: dict[str, Any] | None = None,
    check_every: int | None = 100,
    exchange: str = "auto",
    shard: bool = False,
    **tracked: Any,
) -> Job:
    """Join the job described by the STINT_* environment and resume it if it has a checkpoint.

    Every other keyword names an object to checkpoint (model, optimizer, LR scheduler,
    GradScaler: anything with ``state_dict``/``load_state_dict``). ``counters``: a dict of
    picklable user values; the job saves that very dict (later changes included) and restores it
    in place on resume; it is worker 0's (a count that differs per worker warns at checkpoints).
    ``rank_counters``: a dict of picklable start values copied for every logical rank:
    ``job.rank_counters`` inside the micro-batch loop, saved per logical rank (the same on any
    P); ``job.rank_counters_reduce(name, "sum"|"mean"|"max"|"min")`` reduces one over the L ranks
    (``rank_counters_total(name)``: its sum). ``logical_world_size`` and ``ckpt_dir`` apply when the
    environment does not set them (running by hand); without a checkpoint directory the job
    runs but neither checkpoints nor intercepts signals. ``background``: periodic checkpoints
    are written on a thread from an in-memory snapshot (preemption and final ones never are).
    ``check_every``: compare the replicas' checksums every that many steps and at every
    checkpoint (None: never). ``exchange``: "auto" (by gradient size), "sharded" or "gathered";
    all give the same bits. ``shard``: shard the (one) tracked model's parameters, gradients and
    optimizer state by logical rank (ZeRO-3 style, stint.torch.sharded); the same bits on any P.
    """
    options = JobOptions(seed=seed, logical_world_size=logical_world_size, ckpt_dir=ckpt_dir,
                         interval=Interval() if interval is None else interval, keep=keep,
                         final_checkpoint=final_checkpoint, background=background,
                         rank_counters=dict(rank_counters or {}), check_every=check_every, exchange=exchange,
                         shard=shard)
    env = read_env(logical_world_size=options.logical_world_size, ckpt_dir=options.ckpt_dir)
    return Job(env, tracked, options, counters=counters)


def rendezvous_store(addr: str, port: int, world_size: int, is_master: bool,
                     timeout: float) -> TCPStore:
    """The job's rendezvous. Rank 0 serves it on ``addr`` only (the address the executor gave,
    127.0.0.1 on one machine), never on every interface as ``TCPStore`` does by itself: the
    socket is bound here and handed to the store."""
    listen_fd = None
    if is_master:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(128)
        listen_fd = sock.detach()  # the store owns the descriptor from here on
    return TCPStore(addr, port, world_size, is_master, timedelta(seconds=timeout),
                    master_listen_fd=listen_fd)
