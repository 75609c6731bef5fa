"""Exact resume, periodic checkpoints and the status file, in one process (P = 1)."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import stint.torch as stint
from stint.torch import signals
from stint.torch.store import CheckpointStore


def _digest(model: nn.Module) -> tuple[bytes, ...]:
    return tuple(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                 for t in model.state_dict().values())


def train(ckpt_dir, steps=12, logical=1, stop_at=None, stop_by="signal", interval=None, keep=2):
    """A tiny job with dropout (RNG), BatchNorm (buffers), Adam and an LR schedule.

    Returns {step: parameters after that step} for the steps this run executed, and the job.
    """
    torch.manual_seed(0)
    x, y = torch.randn(96, 8), torch.randint(0, 3, (96,))
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    job = stint.init(model=model, optimizer=opt, scheduler=sched, logical_world_size=logical,
                     ckpt_dir=ckpt_dir, interval=interval, keep=keep, counters={"seen": 0})
    sampler = stint.Sampler(len(x), batch_size=16, seed=1)
    after = {}
    for step in job.steps(steps):
        if step == stop_at:
            os.kill(os.getpid(), signal.SIGUSR1) if stop_by == "signal" else job.request_stop()
        opt.zero_grad()
        for idx in job.batches(sampler):
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            job.counters["seen"] += len(idx)
        opt.step()
        sched.step()
        after[step + 1] = _digest(model)
    return after, job


@pytest.mark.parametrize(("logical", "stop_by"), [(1, "signal"), (4, "signal"), (4, "request")])
def test_resume_is_bitwise_identical_at_every_later_step(tmp_path, logical, stop_by):
    reference, ref_job = train(tmp_path / "ref", logical=logical)
    with pytest.raises(SystemExit) as stopped:
        train(tmp_path / "job", logical=logical, stop_at=4, stop_by=stop_by)
    assert stopped.value.code == stint.PREEMPTED_EXIT_CODE
    # The request came during step 4, so every worker stopped at the boundary after it.
    assert [c.step for c in CheckpointStore(tmp_path / "job").checkpoints()] == [5]
    resumed, job = train(tmp_path / "job", logical=logical)
    assert min(resumed) == 6 and resumed == {s: d for s, d in reference.items() if s >= 6}
    assert job.counters == ref_job.counters == {"seen": 12 * 16}
    # The loop ended: the handlers stay, so a stop in the epilogue is noted, not fatal.
    assert signal.getsignal(signal.SIGUSR1) is signals._on_signal
    os.kill(os.getpid(), signal.SIGUSR1)
    assert signals.requested()
    signals.reset()


def test_periodic_checkpoints_are_pruned_to_the_newest(tmp_path):
    _, job = train(tmp_path, steps=10, interval=stint.Interval(steps=3), keep=2)
    # Due at boundaries 3, 6, 9; then the final checkpoint at 10; two kept.
    assert [c.step for c in CheckpointStore(tmp_path).checkpoints()] == [10, 9]
    assert job.checkpoint_step == 10


def test_status_file_reports_steps_and_checkpoints(tmp_path, monkeypatch):
    status = tmp_path / "status.json"
    monkeypatch.setenv("STINT_STATUS_FILE", str(status))
    train(tmp_path / "ck", steps=6)
    body = json.loads(status.read_text())
    assert (body["state"], body["step"], body["checkpoint_step"]) == ("finished", 6, 6)
    assert body["total_steps"] == 6  # a scheduler can see a job at its last step


def test_resuming_with_another_logical_world_size_is_refused(tmp_path):
    train(tmp_path, steps=2, logical=2)
    with pytest.raises(stint.JobEnvError, match="written with 2 logical ranks.*STINT_LOGICAL_WORLD_SIZE=4"):
        train(tmp_path, steps=4, logical=4)


def test_without_a_checkpoint_directory_the_script_just_runs(tmp_path):
    signals.disarm()  # an earlier job of this process left its (after-the-loop) handlers
    after, job = train(None, steps=3)
    assert len(after) == 3 and job.store is None and job.checkpoint_step is None
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_background_checkpoints_hold_the_state_of_their_own_step(tmp_path):
    reference, _ = train(tmp_path / "ref", steps=12)
    _, job = train(tmp_path / "job", steps=12, interval=stint.Interval(steps=3), keep=5)
    store = CheckpointStore(tmp_path / "job")
    assert [c.step for c in store.checkpoints()] == [12, 9, 6, 3]
    for ckpt in store.checkpoints():  # written on a thread while training went on: still exact
        saved = store.load(ckpt)["tracked"]["model"]
        assert tuple(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                     for t in saved.values()) == reference[ckpt.step]
    assert job.last_save is not None and job.last_save.step == 12


def test_background_checkpoints_do_not_rewrite_frozen_layers(tmp_path):
    """A background checkpoint saves copies; the store still sees the frozen layer unchanged."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 1))  # 256 KiB frozen: its own blob
    model[0].requires_grad_(False)
    opt = torch.optim.SGD(model[1].parameters(), lr=0.1, momentum=0.9)
    job = stint.init(model=model, optimizer=opt, ckpt_dir=tmp_path, interval=stint.Interval(steps=2),
                     background=True, keep=5)
    x = torch.randn(8, 256)
    for _ in job.steps(6):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    store = CheckpointStore(tmp_path)
    newest, *older = store.checkpoints()
    assert older, "several background checkpoints were written"
    frozen = next(t["parts"] for t in newest.manifest["tensors"] if t["shape"] == [256, 256])
    assert {newest.manifest["blobs"][h]["file"] for h, _, _ in frozen} == {older[-1].path.name}  # written once
    assert torch.equal(store.load(newest)["tracked"]["model"]["0.weight"], model[0].weight)


def test_a_stop_file_is_a_stop_request(tmp_path, monkeypatch):
    stop = tmp_path / "stop.json"
    monkeypatch.setenv("STINT_STOP_FILE", str(stop))
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    job = stint.init(model=model, ckpt_dir=tmp_path / "ck")
    with pytest.raises(SystemExit) as stopped:
        for step in job.steps(10):
            if step == 3:
                stop.write_text('{"kind": "stop"}')  # what the executor writes besides SIGUSR1
    assert stopped.value.code == stint.PREEMPTED_EXIT_CODE
    assert [c.step for c in CheckpointStore(tmp_path / "ck").checkpoints()] == [4]


def test_a_checkpoint_loads_as_a_plain_state_dict_and_exports_to_dcp(tmp_path):
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    counters = {"seen": 0}
    job = stint.init(model=model, optimizer=opt, ckpt_dir=tmp_path / "ck", counters=counters)
    for _ in job.steps(3):
        opt.zero_grad()
        model(torch.randn(4, 64)).square().mean().backward()
        opt.step()
        counters["seen"] += 4
    state = stint.load_checkpoint(tmp_path / "ck")
    assert state["step"] == 3 and state["counters"] == {"seen": 12} and set(state["rng"]) == {0}
    fresh = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 2))
    fresh.load_state_dict(state["tracked"]["model"])
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values()))
    assert stint.export_dcp(tmp_path / "ck", tmp_path / "dcp") == 3
    other = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 2))
    target = {"model": other.state_dict()}
    dcp.load(target, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    assert all(torch.equal(a, b) for a, b in zip(target["model"].values(), model.state_dict().values()))
    with pytest.raises(stint.NoCheckpoint, match="no valid checkpoint of step 2"):
        stint.load_checkpoint(tmp_path / "ck", step=2)
    from stint.torch import export

    with pytest.raises(SystemExit, match="stint: .*empty: no valid checkpoint of any step"):
        export.main([str(tmp_path / "empty"), str(tmp_path / "out")])  # the command line: a message


def test_the_dcp_export_loads_the_optimizer_with_get_and_set_optimizer_state_dict(tmp_path):
    """An export keys the optimizer state by parameter name, as DCP's optimizer state dict does:
    a fresh model and AdamW take it and continue bitwise like the job's own."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    def build():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
        return model, torch.optim.AdamW(model.parameters(), lr=0.01)

    def step(model, opt, i):
        opt.zero_grad()
        model(torch.full((4, 8), float(i))).square().mean().backward()
        opt.step()

    model, opt = build()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    job = stint.init(model=model, optimizer=opt, scheduler=sched, ckpt_dir=tmp_path / "ck")
    for i in job.steps(3):
        step(model, opt, i)
        sched.step()
    stint.export_dcp(tmp_path / "ck", tmp_path / "dcp")
    other, other_opt = build()
    target = {"model": other.state_dict(), "optimizer": get_optimizer_state_dict(other, other_opt)}
    dcp.load(target, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    other.load_state_dict(target["model"])
    set_optimizer_state_dict(other, other_opt, target["optimizer"])
    step(model, opt, 7)
    step(other, other_opt, 7)
    assert _digest(other) == _digest(model)
    assert other_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
