"""The SDK on CUDA: runs where a GPU is present and says why it skips elsewhere.

One GPU: a CUDA job with dropout (the CUDA generator swapped per logical rank) resumes bitwise,
and the DataLoader example on CUDA gives one digest uninterrupted and resumed. Two GPUs or more:
two workers over NCCL give the bits of one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch_helpers import SCRIPTS, data, digest, dropout_mlp, logged_steps, run_workers

import stint.torch as stint
from stint.torch import launch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here (CPU-only torch or no GPU)")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dataloader.py"


def _train(ckpt, stop_at=None):
    model = dropout_mlp().cuda()
    x, y = (t.cuda() for t in data())
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    job = stint.init(model=model, optimizer=opt, logical_world_size=4, ckpt_dir=ckpt)
    sampler = stint.Sampler(len(x), batch_size=16, seed=1)
    for step in job.steps(8):
        if step == stop_at:
            job.request_stop()
        opt.zero_grad()
        for idx in job.batches(sampler):
            idx = idx.cuda()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    return digest(model.cpu())


def test_a_cuda_job_with_dropout_resumes_bitwise(tmp_path):
    reference = _train(tmp_path / "ref")
    with pytest.raises(SystemExit):
        _train(tmp_path / "job", stop_at=3)
    assert _train(tmp_path / "job") == reference


@pytest.fixture(scope="module")
def _fork_server():
    yield
    launch.stop_warm()


def _done(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("done"))


def test_the_dataloader_example_on_cuda_is_the_same_resumed(tmp_path, _fork_server):
    args = ["--device", "cuda", "--eval-every", "1", "--sleep", "0.05"]
    codes, outs = run_workers(EXAMPLE, args, 1, 4, tmp_path / "a", tmp_path / "a")
    assert codes == [0], outs
    codes, cut = run_workers(EXAMPLE, args, 1, 4, tmp_path / "b", tmp_path / "b1", stop_after=5)
    assert codes == [75], cut
    codes, resumed = run_workers(EXAMPLE, args, 1, 4, tmp_path / "b", tmp_path / "b2")
    assert codes == [0] and min(logged_steps(resumed[0])) == max(logged_steps(cut[0])) + 1
    assert _done(resumed[0]) == _done(outs[0])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs one GPU per worker; fewer than 2 here")
def test_two_workers_over_nccl_give_the_bits_of_one(tmp_path, _fork_server):
    digests = []
    for workers in (1, 2):
        outs = [tmp_path / f"p{workers}.{r}.txt" for r in range(workers)]
        procs = launch.start_warm(SCRIPTS / "exchange_job.py", ["--device", "cuda"], workers, 4, None,
                                  stdout=outs, extra_env=[{"CUDA_VISIBLE_DEVICES": str(r)} for r in range(workers)])
        assert launch.wait(procs) == 0
        digests.append({_done(o.read_text()).split()[2] for o in outs})
    assert digests[0] == digests[1] and len(digests[0]) == 1
