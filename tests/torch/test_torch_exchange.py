"""The exact exchange across real gloo workers: both paths and every P give the same bits, and
replicas that drift apart are caught by their checksums."""

from __future__ import annotations

import pytest
from torch_helpers import SCRIPTS, run_workers

from stint.torch import launch
from stint.torch.store import CheckpointStore

SCRIPT = SCRIPTS / "exchange_job.py"


@pytest.fixture(scope="module", autouse=True)
def _fork_server():
    yield
    launch.stop_warm()


@pytest.mark.slow
def test_every_path_and_every_p_give_the_same_bits(tmp_path):
    runs = {}
    for workers, exchange in [(1, "auto"), (2, "gathered"), (2, "sharded"), (4, "sharded"), (4, "gathered")]:
        ckpt = tmp_path / "ck" if (workers, exchange) == (4, "sharded") else None  # + background checkpoints
        codes, outs = run_workers(SCRIPT, ["--exchange", exchange, "--checkpoint-every", "3"], workers, 4,
                                  ckpt, tmp_path / f"{workers}{exchange}")
        assert codes == [0] * workers, outs
        done = [line.split() for out in outs for line in out.splitlines() if line.startswith("done")]
        assert len({d[2] for d in done}) == 1  # every replica the same
        assert {d[4] for d in done} == {"none" if workers == 1 else exchange}
        logged = [line for line in outs[0].splitlines() if line.startswith("step")]
        runs[(workers, exchange)] = (done[0][2], tuple(logged))
    assert len(set(runs.values())) == 1, runs  # parameters and the logged mean loss alike
    listed = CheckpointStore(tmp_path / "ck").checkpoints()
    assert [c.step for c in listed] == [10, 9]  # the final one and the last periodic one (keep=2)
    for c in listed:  # the workers shared the write, the periodic ones from snapshots on a thread
        assert c.manifest["writers"] == 4
        parts = {loc["file"] for loc in c.manifest["blobs"].values()} - {c.path.name}
        assert len([p for p in parts if p.endswith(".part")]) >= 2, parts  # a 19 KB state: 5 items


@pytest.mark.slow
def test_replicas_that_differ_raise_an_error_naming_the_tensor(tmp_path):
    codes, outs = run_workers(SCRIPT, ["--diverge-at", "3"], 2, 2, None, tmp_path / "div")
    assert codes == [3, 3], outs
    for out in outs:  # checked every 2 steps: caught at the boundary of step 4, on both workers
        assert "divergence: stint: the replicas diverged before step 4: model.0.weight differs between " \
               "worker 0 and worker(s) [1]" in out


@pytest.mark.parametrize("logical", [2, 3, 5, 8])
def test_one_worker_folds_in_rank_order_in_one_buffer_whatever_order_ranks_come(logical):
    """One worker hosting every rank, in order or shuffled, gives the left fold in rank order
    (the bits every P gives); in order it keeps no buffer beyond the one the gradients view."""
    import random

    import torch

    from stint.torch.exchange import Exchange

    g = torch.Generator().manual_seed(logical)
    grads = [torch.randn(1000, generator=g) * 10 ** torch.randn(1000, generator=g) for _ in range(logical)]
    left_fold = grads[0].clone()
    for x in grads[1:]:
        left_fold.add_(x)
    order = list(range(logical))
    random.Random(logical).shuffle(order)
    for placement in (tuple(range(logical)), tuple(order)):
        param = torch.zeros(1000, requires_grad=True)
        ex = Exchange([param], [placement])
        first = None
        for step in range(2):
            ex.start_step(reuse=True)
            for r in placement:
                param.grad = grads[r].clone()
                ex.take(r)
                assert len(ex._fold._early) <= (0 if placement == tuple(range(logical)) else logical)
            ex.reduce(0)
            assert torch.equal(param.grad, left_fold / logical)
            first = param.grad.data_ptr() if first is None else first
        assert param.grad.data_ptr() == first  # the same buffer every step
