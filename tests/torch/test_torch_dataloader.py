"""job.loader and job.epochs: DataLoader integration, seeded per sample, resumable mid-epoch."""

from __future__ import annotations

import difflib
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset
from torch_helpers import logged_steps, run_workers

import stint.torch as stint
from stint.torch import launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Noisy(Dataset):
    """Item i: (i, a draw from each global generator), as random augmentation would make."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i), torch.rand(()).item(), random.random(), np.random.rand()])


def collect(logical=1, num_workers=0, epochs=2, stop_at=None, ckpt=None, outside=False):
    """{step: the micro-batches this job saw}, epoch by epoch, with the generators' draws."""
    job = stint.init(logical_world_size=logical, ckpt_dir=ckpt, seed=3)
    loader = job.loader(Noisy(), batch_size=8, num_workers=num_workers)
    seen, epochs_seen = {}, []
    for epoch in job.epochs(epochs):
        epochs_seen.append(epoch)
        for batch in loader:
            if job.step == stop_at:
                job.request_stop()
            seen[job.step] = [mb.clone() for mb in batch]
            if outside:
                torch.rand(2), random.random()
    return seen, epochs_seen, len(loader)


def test_each_logical_rank_gets_its_slice_and_samples_are_seeded_by_step_and_index():
    alone, epochs, per_epoch = collect(logical=1)
    assert per_epoch == 3 and epochs == [0, 1] and sorted(alone) == list(range(6))
    epoch0 = torch.cat([alone[s][0] for s in range(3)])
    assert sorted(epoch0[:, 0].tolist()) == list(range(24))  # an epoch is a permutation
    assert not torch.equal(alone[0][0], alone[3][0])  # reshuffled, and augmented anew
    sliced, _, _ = collect(logical=4)  # one worker hosting 4 logical ranks
    workers, _, _ = collect(logical=4, num_workers=2, outside=True)  # samples made in 2 processes
    for step, (whole,) in alone.items():
        assert torch.equal(torch.cat(sliced[step]), whole)
        assert torch.equal(torch.cat(workers[step]), whole)


def test_a_job_resumed_mid_epoch_continues_the_epoch_exactly(tmp_path):
    reference, _, _ = collect(logical=2)
    with pytest.raises(SystemExit):
        collect(logical=2, ckpt=tmp_path, stop_at=4)  # epoch 1, its second step
    resumed, epochs, _ = collect(logical=2, ckpt=tmp_path)
    assert epochs == [1] and sorted(resumed) == [5]
    assert all(torch.equal(a, b) for a, b in zip(resumed[5], reference[5], strict=True))
    finished, epochs, _ = collect(logical=2, ckpt=tmp_path)  # re-run a finished job: nothing to do
    assert finished == {} and epochs == []


def test_loader_errors_name_the_problem():
    job = stint.init(logical_world_size=3)
    with pytest.raises(ValueError, match="batch_size=8 .* not divisible by the 3 logical ranks"):
        job.loader(Noisy(), batch_size=8)

    class Stream(IterableDataset):
        def __iter__(self):
            yield 1

    with pytest.raises(TypeError, match="an IterableDataset has no index"):
        job.loader(Stream(), batch_size=3)
    with pytest.raises(RuntimeError, match="create the job's loader first"):
        next(job.epochs(1))


def test_the_example_differs_from_the_plain_script_in_at_most_8_lines():
    plain, stint_ = ((EXAMPLES / f).read_text().splitlines() for f in ("dataloader_plain.py", "dataloader.py"))
    diff = [d for d in difflib.unified_diff(plain, stint_, lineterm="", n=0) if d[:3] not in ("---", "+++")]
    added = [line for line in diff if line.startswith("+")]
    removed = [line for line in diff if line.startswith("-")]
    assert len(added) <= 8 and len(removed) <= 8, diff


@pytest.fixture(scope="module")
def _fork_server():
    yield
    launch.stop_warm()


ARGS = ["--epochs", "2", "--batch-size", "32", "--eval-every", "1", "--sleep", "0.05"]


def _done(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith("done")]
    return line


@pytest.mark.slow
def test_the_dataloader_example_gives_one_digest_for_p_1_2_4_and_after_sigterm(tmp_path, _fork_server):
    script = EXAMPLES / "dataloader.py"
    done = {}
    for workers in (1, 2, 4):
        codes, outs = run_workers(script, ARGS, workers, 4, tmp_path / f"ck{workers}", tmp_path / f"p{workers}")
        assert codes == [0] * workers, outs
        done[workers] = {_done(out) for out in outs}  # every worker prints its replica's digest
    assert done[1] == done[2] == done[4] and len(done[1]) == 1
    assert _done(outs[0]).startswith("done step 16 digest ")
    stop = random.Random().randint(2, 12)
    codes, outs = run_workers(script, ARGS, 2, 4, tmp_path / "cut", tmp_path / "a", stop_after=stop)
    assert codes == [75, 75], (stop, outs)
    cut = max(logged_steps(outs[0]))
    codes, outs = run_workers(script, ARGS, 4, 4, tmp_path / "cut", tmp_path / "b")  # resumed on 4
    assert codes == [0] * 4 and min(logged_steps(outs[0])) == cut + 1, (stop, outs)
    assert {_done(out) for out in outs} == done[1], stop


def _first_batch(**kw):
    job = stint.init(logical_world_size=2, seed=3)
    loader = job.loader(Noisy(), batch_size=8, **kw)
    for _ in job.epochs(1):
        for batch in loader:
            return torch.cat(list(batch))


def test_every_dataloader_keyword_works_or_is_refused_naming_it():
    plain = _first_batch()
    assert torch.equal(_first_batch(drop_last=True), plain)  # what the job's batches do anyway
    assert torch.equal(_first_batch(generator=torch.Generator().manual_seed(3)), plain)  # its seed
    assert not torch.equal(_first_batch(generator=torch.Generator().manual_seed(4)), plain)
    calls = []
    passed = _first_batch(num_workers=1, timeout=60, prefetch_factor=3, persistent_workers=True,
                          worker_init_fn=calls.append, multiprocessing_context="spawn",
                          pin_memory_device="", in_order=True)
    assert torch.equal(passed, plain)
    for kw, match in [
        ({"drop_last": False}, "drop_last=False: the job's global batches are whole"),
        ({"sampler": [0, 1]}, "sampler= is the job's"),
        ({"batch_sampler": [[0, 1]]}, "batch_sampler= is the job's"),
        ({"in_order": False}, "in_order=False"),
        ({"generator": torch.Generator().manual_seed(3), "seed": 3}, "generator= and seed= both"),
        ({"num_wrokers": 2}, "num_wrokers= is no DataLoader keyword"),
    ]:
        with pytest.raises((TypeError, ValueError), match=rf"job.loader: {match}"):
            _first_batch(**kw)
