"""Exactness guarded: each cause of silent divergence is isolated or raises an error naming it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch_helpers import data, digest, dropout_mlp

import stint.torch as stint
from stint.torch.store import CheckpointStore


def train(ckpt, steps=8, logical=1, outside=False, stop_at=None, accumulate=1):
    """Dropout MLP with SGD; ``outside``: draw from every global generator between micro-batch
    loops (a DataLoader iterator, an eval loop, user code); ``accumulate``: optimizer step every
    that many job steps (gradient accumulation across steps)."""
    model = dropout_mlp()
    x, y = data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    job = stint.init(model=model, optimizer=opt, logical_world_size=logical, ckpt_dir=ckpt)
    sampler = stint.Sampler(len(x), batch_size=16, seed=1)
    evaluation = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    for step in job.steps(steps):
        if step == stop_at:
            job.request_stop()
        if outside:
            random.random(), np.random.randn(3), torch.rand(3)  # 3 normals: NumPy caches a 4th
            next(iter(evaluation))  # its base seed is one draw from the global torch generator
            with torch.no_grad():
                model(x[:4])  # training mode: dropout draws too
        if step % accumulate == 0:
            opt.zero_grad()
        for idx in job.batches(sampler):
            scale = 1.0 + 0.01 * np.random.standard_normal()  # may come from NumPy's Gaussian cache
            (scale * F.cross_entropy(model(x[idx]), y[idx])).backward()
        if (step + 1) % accumulate == 0:
            opt.step()
    return digest(model), job


@pytest.mark.parametrize("logical", [1, 2])
def test_draws_outside_the_micro_batch_loop_do_not_shift_a_ranks_stream(tmp_path, logical):
    quiet, _ = train(None, logical=logical)
    noisy, _ = train(None, logical=logical, outside=True)
    assert noisy == quiet
    with pytest.raises(SystemExit):
        train(tmp_path, logical=logical, outside=True, stop_at=3)
    resumed, _ = train(tmp_path, logical=logical, outside=True)
    assert resumed == quiet


def test_settings_are_recorded_and_a_resume_with_other_settings_warns(tmp_path):
    threads = torch.get_num_threads()
    with pytest.raises(SystemExit):
        train(tmp_path, stop_at=2)
    meta = CheckpointStore(tmp_path).checkpoints()[0].meta
    assert meta["settings"]["torch threads"] == threads
    assert meta["settings"]["torch version"] == torch.__version__
    torch.set_num_threads(threads + 1)
    try:
        with pytest.warns(UserWarning, match=rf"torch threads: {threads} -> {threads + 1}"):
            train(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _tiny_job(**tracked):
    return stint.init(logical_world_size=2, **tracked)


def _step(job, model, opt, x):
    for step in job.steps(2):
        opt.zero_grad()
        for lr in job.logical_ranks():
            model(x[lr : lr + 1]).sum().backward()
        opt.step()


def test_an_optimizer_not_passed_to_init_is_an_error():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(stint.DivergenceError, match=r"an optimizer \(SGD\) that was not passed to init"):
        _step(_tiny_job(model=model), model, opt, torch.ones(2, 4))


def test_a_parameter_of_an_untracked_module_is_an_error():
    model, head = nn.Linear(4, 4), nn.Linear(4, 1)
    opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
    with pytest.raises(stint.DivergenceError, match=r"optimizer 'optimizer' \(param group 0, parameter 2, "
                                                    r"shape \(1, 4\)\) belongs to no module passed to init"):
        _step(_tiny_job(model=model, optimizer=opt), lambda x: head(model(x)), opt, torch.ones(2, 4))


def test_an_untracked_lr_scheduler_is_an_error():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    with pytest.raises(stint.DivergenceError, match="has an LR scheduler that was not passed to init"):
        _step(_tiny_job(model=model, optimizer=opt), model, opt, torch.ones(2, 4))


@pytest.mark.parametrize("logical", [1, 2])
def test_leaving_the_micro_batch_loop_early_is_an_error(logical):
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    job = stint.init(model=model, optimizer=opt, logical_world_size=logical)
    with pytest.raises(stint.DivergenceError, match="micro-batch loop .* of step 0 was left early"):
        for _ in job.steps(3):
            for lr in job.logical_ranks():
                model(torch.ones(1, 4)).sum().backward()
                break
            opt.step()


def test_an_optimizer_step_without_the_micro_batch_loop_is_an_error():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    job = stint.init(model=model, optimizer=opt, logical_world_size=2)
    with pytest.raises(stint.DivergenceError, match="stepped at step 0 on gradients that were not reduced"):
        for _ in job.steps(2):
            model(torch.ones(1, 4)).sum().backward()
            opt.step()


def test_accumulation_across_steps_adds_each_steps_mean_whatever_the_hosting():
    """Two job steps per optimizer step: the gradient is the sum of the two steps' means (as DDP
    gives), not the earlier steps' gradient added to one logical rank's share (P-dependent)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    x = torch.randn(8, 4)
    job = stint.init(model=model, logical_world_size=2)
    for step in job.steps(2):
        for lr in job.logical_ranks():
            model(x[4 * step + 2 * lr : 4 * step + 2 * lr + 2]).square().sum().backward()
    expected = []
    for p in model.parameters():
        means = []
        for step in range(2):
            parts = [torch.autograd.grad(model(x[4 * step + 2 * lr : 4 * step + 2 * lr + 2]).square().sum(), p)[0]
                     for lr in range(2)]
            means.append((parts[0] + parts[1]) / 2)
        expected.append(means[0] + means[1])
    assert all(torch.equal(p.grad, e) for p, e in zip(model.parameters(), expected, strict=True))


def test_a_resume_between_accumulated_steps_keeps_the_pending_gradients(tmp_path):
    reference, _ = train(None, logical=2, accumulate=2)
    with pytest.raises(SystemExit):
        train(tmp_path, logical=2, accumulate=2, stop_at=2)  # stops after step 2: half an accumulation
    state = CheckpointStore(tmp_path).load_latest()[1]
    assert "grads" in state and state["grads"][0] is not None
    resumed, _ = train(tmp_path, logical=2, accumulate=2)
    assert resumed == reference


def test_counters_are_the_users_own_dict(tmp_path):
    counters = {"seen": 0}
    model = nn.Linear(2, 1)
    job = stint.init(model=model, ckpt_dir=tmp_path, counters=counters)
    for _ in job.steps(3):
        counters["seen"] += 1  # the user's dict, updated after init()
    assert job.counters is counters
    assert CheckpointStore(tmp_path).load_latest()[1]["counters"] == {"seen": 3}
    again = {"seen": -1}
    stint.init(model=model, ckpt_dir=tmp_path, counters=again)
    assert again == {"seen": 3}  # restored in place
