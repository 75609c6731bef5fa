"""The exact exchange across real gloo workers: both paths and every P give the same bits, and
replicas that drift apart are caught by their checksums."""

from __future__ import annotations

import pytest
from torch_helpers import SCRIPTS, run_workers

from stint.torch import launch
from stint.torch.exchange import cover, split

SCRIPT = SCRIPTS / "exchange_job.py"


@pytest.fixture(scope="module", autouse=True)
def _fork_server():
    yield
    launch.stop_warm()


def test_tree_and_covers():
    assert [split(0, w) for w in (2, 3, 4, 5, 6, 8)] == [1, 2, 2, 4, 4, 4]
    assert cover([0, 1, 2, 3], 4) == [(0, 4)]
    assert cover([2, 3], 4) == [(2, 4)]
    assert cover([3, 1], 4) == [(1, 2), (3, 4)]  # not a subtree: two leaves travel
    assert cover([3, 4, 5], 6) == [(3, 4), (4, 6)]  # [3, 6) straddles the split of [0, 6) at 4


@pytest.mark.slow
def test_every_path_and_every_p_give_the_same_bits(tmp_path):
    runs = {}
    for workers, exchange in [(1, "auto"), (2, "gathered"), (2, "sharded"), (4, "sharded"), (4, "gathered")]:
        codes, outs = run_workers(SCRIPT, ["--exchange", exchange], workers, 4, None,
                                  tmp_path / f"{workers}{exchange}")
        assert codes == [0] * workers, outs
        done = [line.split() for out in outs for line in out.splitlines() if line.startswith("done")]
        assert len({d[2] for d in done}) == 1  # every replica the same
        assert {d[4] for d in done} == {"none" if workers == 1 else exchange}
        logged = [line for line in outs[0].splitlines() if line.startswith("step")]
        runs[(workers, exchange)] = (done[0][2], tuple(logged))
    assert len(set(runs.values())) == 1, runs  # parameters and the logged mean loss alike


@pytest.mark.slow
def test_replicas_that_differ_raise_an_error_naming_the_tensor(tmp_path):
    codes, outs = run_workers(SCRIPT, ["--diverge-at", "3"], 2, 2, None, tmp_path / "div")
    assert codes == [3, 3], outs
    for out in outs:  # checked every 2 steps: caught at the boundary of step 4, on both workers
        assert "divergence: stint: the replicas diverged before step 4: model.0.weight differs between " \
               "worker 0 and worker(s) [1]" in out


@pytest.mark.parametrize("logical", [2, 3, 5, 6, 8])
def test_folding_as_ranks_come_equals_the_tree_in_any_order(logical):
    """One worker hosting every rank, in a shuffled order, folds to the bits of the tree; the
    sharded path's finish_into gives the same bits as finish."""
    import random

    import torch

    from stint.torch.exchange import Exchange, finish, finish_into

    g = torch.Generator().manual_seed(logical)
    grads = [torch.randn(1000, generator=g) * 10 ** torch.randn(1000, generator=g) for _ in range(logical)]
    leaves = {(r, r + 1): grads[r] for r in range(logical)}
    tree = finish(leaves, 0, logical)
    out = torch.empty(1000)
    finish_into(leaves, 0, logical, out, [])
    assert torch.equal(out, tree)
    order = list(range(logical))
    random.Random(logical).shuffle(order)
    param = torch.zeros(1000, requires_grad=True)
    ex = Exchange([param], [tuple(order)])
    for r in order:
        param.grad = grads[r].clone()
        ex.take(r)
    ex.reduce(0)
    assert torch.equal(param.grad, tree / logical)
    left_fold = sum(grads[1:], grads[0].clone())
    assert logical < 4 or not torch.equal(tree, left_fold)  # from L = 4 another order than a plain sum
