"""shard=True: parameters, gradients and optimizer state sharded by logical rank, bitwise the same
on any P, resumed and resized exactly, 1/P of the state per worker."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_helpers import digest, logged_steps, run_workers

import stint.torch as stint
from stint.torch import launch
from stint.torch.sharded import ALIGN, units_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPT = EXAMPLES / "sharded_lm.py"
ARGS = ["--steps", "10", "--log-every", "1", "--sleep", "0.05"]


@pytest.fixture(scope="module")
def _fork_server():
    yield
    launch.stop_warm()


def _done(out: str) -> tuple[str, int]:
    (line,) = [line for line in out.splitlines() if line.startswith("done")]
    words = line.split()
    return words[4], int(words[6])  # the digest, the peak parameter + optimizer bytes


@pytest.mark.slow
def test_the_sharded_example_is_bitwise_the_same_on_p_1_2_4_and_after_a_resume_on_another_p(
        tmp_path, _fork_server):
    done = {}
    for workers in (1, 2, 4):
        codes, outs = run_workers(SCRIPT, ARGS, workers, 4, None, tmp_path / f"p{workers}")
        assert codes == [0] * workers, outs
        done[workers] = {_done(out) for out in outs}
        assert len(done[workers]) == 1, done  # every worker: the same digest and the same peak
    (d1, peak1), (d2, _), (d4, peak4) = (next(iter(done[w])) for w in (1, 2, 4))
    assert d1 == d2 == d4
    assert peak4 <= 0.35 * peak1, (peak4, peak1)
    stop = random.Random().randint(2, 7)
    codes, outs = run_workers(SCRIPT, ARGS, 4, 4, tmp_path / "cut", tmp_path / "a", stop_after=stop)
    assert codes == [75] * 4, (stop, outs)
    cut = max(logged_steps(outs[0]))
    codes, outs = run_workers(SCRIPT, ARGS, 2, 4, tmp_path / "cut", tmp_path / "b")  # resumed on 2
    assert codes == [0, 0] and min(logged_steps(outs[0])) == cut + 1, (stop, outs)
    assert {_done(out)[0] for out in outs} == {d1}, stop


def _lm():
    sys.path.insert(0, str(EXAMPLES))
    from sharded_lm import LM, markov_text

    torch.manual_seed(0)
    return LM(layers=2), markov_text(n=64)


def _train(ckpt, steps=6, stop_at=None, accumulate=1, shard=True, clip=True, models=None):
    model, data = _lm()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    job = stint.init(model=model, optimizer=opt, shard=shard, logical_world_size=4, ckpt_dir=ckpt)
    sampler = stint.Sampler(len(data), batch_size=16, seed=0)
    for step in job.steps(steps):
        if step == stop_at:
            job.request_stop()
        if step % accumulate == 0:
            opt.zero_grad()
        for idx in job.batches(sampler):
            seq = data[idx]
            F.cross_entropy(model(seq[:, :-1]).reshape(-1, 64), seq[:, 1:].reshape(-1)).backward()
        if (step + 1) % accumulate == 0:
            if clip:
                job.clip_grad_norm_(0.5)
            opt.step()
    if models is not None:
        models.append((model, opt))
    return digest(model)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_sharded_job_resumes_bitwise_from_any_step(tmp_path, accumulate):
    """One worker hosting 4 logical ranks: a stop at step 3 (mid-accumulation with 2) resumes to
    the unstopped run's bits (optimizer state, its step counts, pending gradients)."""
    reference = _train(tmp_path / "ref", accumulate=accumulate)
    with pytest.raises(SystemExit):
        _train(tmp_path / "job", stop_at=2, accumulate=accumulate)
    assert _train(tmp_path / "job", accumulate=accumulate) == reference


def test_units_and_the_shard_rule_depend_on_the_model_and_l_only():
    model, _ = _lm()
    names = [name for name, _, _ in units_of(model)]
    assert names == ["tok", "pos", "blocks.0", "blocks.1", "norm", "head"]  # the ModuleList opened
    from stint.torch.sharded import Sharded

    engine = Sharded(model, [(0, 1, 2, 3)], rank=0)
    for u in engine.units:  # L = 4 shards of a multiple of 64 elements; this worker holds all 4
        assert u.shard % ALIGN == 0 and u.shard * 4 >= u.numel > u.shard * 4 - 4 * ALIGN
        assert u.block.numel() == 4 * u.shard
    engine.close()


def test_shard_needs_one_module_and_an_unstepped_single_group_optimizer():
    model = nn.Linear(4, 2)
    with pytest.raises(ValueError, match="exactly one tracked module"):
        stint.init(model=model, head=nn.Linear(2, 2), shard=True, logical_world_size=2)
    opt = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": 0.0}], lr=0.1)
    with pytest.raises(ValueError, match="one optimizer param group, got 2"):
        stint.init(model=model, optimizer=opt, shard=True, logical_world_size=2)


def test_a_sharded_checkpoint_loads_whole_and_exports_to_dcp(tmp_path):
    """The checkpoint, its shards joined, is the job's whole model and a plain optimizer state;
    its DCP export loads into a plain model and AdamW (get/set_optimizer_state_dict), which then
    step exactly like ones loaded from the plain state dicts."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    ran = []
    _train(tmp_path / "s", steps=3, models=ran)
    (job_model, _), = ran
    state = stint.load_checkpoint(tmp_path / "s")
    assert state["tracked"]["model"].keys() == job_model.state_dict().keys()
    for name, t in job_model.state_dict().items():
        assert torch.equal(state["tracked"]["model"][name], t), name
    stint.export_dcp(tmp_path / "s", tmp_path / "dcp")
    plain, _ = _lm()
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=1e-3)
    plain.load_state_dict(state["tracked"]["model"])
    plain_opt.load_state_dict(state["tracked"]["optimizer"])
    model, _ = _lm()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    target = {"model": model.state_dict(), "optimizer": get_optimizer_state_dict(model, opt)}
    dcp.load(target, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    model.load_state_dict(target["model"])
    set_optimizer_state_dict(model, opt, target["optimizer"])
    assert digest(model) == digest(job_model)
    for m, o in ((model, opt), (plain, plain_opt)):
        o.zero_grad()
        torch.manual_seed(5)  # the same dropout masks
        m(torch.arange(8)[None]).square().mean().backward()
        o.step()
    assert digest(model) == digest(plain)
    assert opt.state_dict()["state"][0]["step"] == plain_opt.state_dict()["state"][0]["step"] == 4
