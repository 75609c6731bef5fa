"""DataLoader, natively: ``job.loader(dataset, batch_size=...)`` over ``torch.utils.data.DataLoader``.

The global batch of step s is a pure function of (seed, s) (:class:`~stint.torch.Sampler`);
logical rank l gets slice l of it. Each item travels as the key (step, logical rank, index), and
every sample is produced with the Python, NumPy and torch generators seeded from
(seed, step, index), every collated micro-batch from (seed, step, logical rank): augmentation in
the dataset or the collate function gives the same bits in any worker process, in any order,
for any P, and after a resume. The data position is the step itself, so a resumed job continues
mid-epoch exactly; ``num_workers``, ``pin_memory``, ``collate_fn``, ``persistent_workers``,
``prefetch_factor`` work as in DataLoader (one iterator serves every epoch: workers are not
restarted per epoch).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, default_collate

from stint.torch import rng
from stint.torch.env import JobEnv
from stint.torch.sampler import Sampler

T = TypeVar("T")


class Trainer(Protocol):
    """What a loader needs of the job that owns it (:class:`stint.torch.Job`): its worker's
    environment, and the loops that hand micro-batches out with each logical rank's generators."""

    env: JobEnv

    def micro_batches(self, items: Sequence[T]) -> Iterator[T]: ...

    def epoch_steps(self, loader: Loader) -> Iterator[StepBatch]: ...

Key = tuple[int, int, int]  # (step, logical rank, dataset index)
# DataLoader keywords passed through as they are (after num_workers, collate_fn, pin_memory).
PASSED = ("timeout", "worker_init_fn", "multiprocessing_context", "prefetch_factor", "persistent_workers",
          "pin_memory_device")
# The others: what the job decides itself, and why.
DECIDED = {
    "sampler": "sampler= is the job's (the global batch of step s is a pure function of the seed and s)",
    "batch_sampler": "batch_sampler= is the job's (each logical rank's slice of the step's global batch)",
    "dataset": "dataset is the first argument",
}


def dataloader_options(dataloader_args: dict[str, Any], seed: int | None) -> tuple[dict[str, Any], int | None]:
    """The keywords for ``DataLoader`` among ``job.loader``'s extra ones, and the shuffle seed (a
    ``generator``'s initial seed); raise naming a keyword the job cannot honour or does not know."""
    args = dict(dataloader_args)
    for name, why in DECIDED.items():
        if name in args:
            raise TypeError(f"job.loader: {why}; pass a map-style dataset and batch_size")
    if args.pop("drop_last", True) is not True:
        raise ValueError("job.loader: drop_last=False: the job's global batches are whole (each split evenly "
                         "over the logical ranks), so the last partial batch is always dropped")
    if args.get("in_order", True) is not True:
        raise ValueError("job.loader: in_order=False would hand micro-batches out of step order; "
                         "the job's batches come in order")
    args.pop("in_order", None)
    generator = args.pop("generator", None)
    if generator is not None:
        if seed is not None:
            raise ValueError("job.loader: generator= and seed= both set the shuffle seed; pass one")
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"job.loader: generator= must be a torch.Generator, got {type(generator).__name__}")
        seed = generator.initial_seed()  # the shuffle is the job's, seeded as the generator was
    for name in args:
        if name not in PASSED:
            raise TypeError(f"job.loader: {name}= is no DataLoader keyword stint.torch knows "
                            f"(it passes {', '.join(PASSED)})")
    return args, seed


class _Keyed(Dataset[tuple[Key, Any]]):
    """The user's dataset, read by key; each sample drawn from generators seeded by its key."""

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Key) -> tuple[Key, Any]:
        step, _, index = key
        rng.seed_all(rng.mix(self.seed, step, index))
        return key, self.dataset[index]


class _Collate:
    """The user's collate function, with generators seeded by (seed, step, logical rank)."""

    def __init__(self, collate: Callable[[list[Any]], Any], seed: int) -> None:
        self.collate, self.seed = collate, seed

    def __call__(self, items: list[tuple[Key, Any]]) -> Any:
        step, lr, _ = items[0][0]
        rng.seed_all(rng.mix(self.seed, step, lr, 0xC011))
        return self.collate([sample for _, sample in items])


class _Steps:
    """The batch sampler: from step ``start`` on, each hosted logical rank's keys, step by step."""

    def __init__(self, sampler: Sampler, hosted: Sequence[int], logical_world_size: int) -> None:
        self.sampler, self.hosted, self.lws = sampler, tuple(hosted), logical_world_size
        self.start = 0

    def __iter__(self) -> Iterator[list[Key]]:
        for step in itertools.count(self.start):
            for lr in self.hosted:
                yield [(step, lr, int(i)) for i in self.sampler.shard(step, lr, self.lws)]


class StepBatch:
    """One step's micro-batches, one per logical rank this worker hosts: iterate it once, and run
    forward and backward for each (like :meth:`Job.batches`)."""

    def __init__(self, job: Trainer, items: list[Any]) -> None:
        self._job, self._items = job, items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return self._job.micro_batches(self._items)


class Loader:
    """A resumable, seeded DataLoader for one job. Build it with :meth:`Job.loader`.

    ``for batch in loader`` (inside ``for epoch in job.epochs(n)``) yields the rest of the
    current epoch, one :class:`StepBatch` per step; ``len(loader)`` is the steps per epoch.
    """

    def __init__(self, job: Trainer, dataset: Any, batch_size: int, *, shuffle: bool, seed: int,
                 num_workers: int, collate_fn: Callable[[list[Any]], Any] | None,
                 pin_memory: bool, **dataloader_args: Any) -> None:
        if isinstance(dataset, IterableDataset):
            raise TypeError("job.loader: an IterableDataset has no index to seed and resume from; "
                            "pass a map-style dataset (with __len__ and __getitem__)")
        lws = job.env.logical_world_size
        if not isinstance(batch_size, int) or batch_size < 1:
            raise TypeError(f"job.loader: batch_size={batch_size!r} must be the global batch, a positive int")
        if batch_size % lws:
            raise ValueError(f"job.loader: batch_size={batch_size} (the global batch) is not divisible "
                             f"by the {lws} logical ranks")
        self._job = job
        self.sampler = Sampler(len(dataset), batch_size, seed=seed, shuffle=shuffle)
        self._keys = _Steps(self.sampler, job.env.logical_ranks, lws)
        self._main_process = num_workers == 0
        self._data = DataLoader(
            _Keyed(dataset, seed), batch_sampler=self._keys, num_workers=num_workers,
            collate_fn=_Collate(collate_fn or default_collate, seed), pin_memory=pin_memory,
            generator=torch.Generator().manual_seed(seed), **dataloader_args)
        self._it: Iterator[Any] | None = None
        self._next_step = -1

    def __len__(self) -> int:
        return self.sampler.steps_per_epoch

    def __iter__(self) -> Iterator[StepBatch]:
        return self._job.epoch_steps(self)

    def fetch(self, step: int) -> list[Any]:
        """The hosted logical ranks' micro-batches of ``step`` (the live generators untouched)."""
        if self._it is None or self._next_step != step:
            self.close()
            self._keys.start = step
            self._it = iter(self._data)
        saved = rng.capture() if self._main_process else None  # samples are made in this process
        try:
            items = [next(self._it) for _ in self._keys.hosted]
        finally:
            if saved is not None:
                rng.restore(saved)
        self._next_step = step + 1
        return items

    def close(self) -> None:
        """Let the DataLoader's iterator (and its worker processes) go."""
        self._it, self._next_step = None, -1
