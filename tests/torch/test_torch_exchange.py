"""The exact exchange across real gloo workers: both paths and every P give the same bits, and
replicas that drift apart are caught by their checksums."""

from __future__ import annotations

import pytest
import torch
from torch_helpers import SCRIPTS, run_workers

import stint.torch as stint
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


def _done_digests(outs):
    return {line.split()[2] for out in outs for line in out.splitlines() if line.startswith("done")}


@pytest.mark.slow
def test_draws_after_the_micro_batch_loop_are_the_same_on_every_p(tmp_path):
    """Python, NumPy and torch draws after the loop (before the optimizer step) come from one
    stream for the whole job: every P gives the same bits, and the replicas agree."""
    digests = set()
    for workers in (1, 2, 4):
        codes, outs = run_workers(SCRIPT, ["--draw-after"], workers, 4, None, tmp_path / f"draw{workers}")
        assert codes == [0] * workers, outs
        digests |= _done_digests(outs)
    assert len(digests) == 1, digests


@pytest.mark.slow
def test_replicas_diverged_at_the_final_step_fail_and_the_majority_is_kept(tmp_path):
    codes, outs = run_workers(SCRIPT, [], 4, 4, tmp_path / "ref", tmp_path / "ref")
    assert codes == [0] * 4, outs
    late = ["--diverge-at", "9", "--diverge-late", "--diverger", "3"]  # after the last optimizer step
    codes, outs = run_workers(SCRIPT, late, 4, 4, tmp_path / "four", tmp_path / "four")
    assert codes == [3] * 4, outs
    for out in outs:
        assert "the replicas diverged before step 10: model.3.weight differs between worker 0 and " \
               "worker(s) [3]" in out
        assert "the checkpoint of step 10 holds the state of the majority, worker(s) [0, 1, 2]" in out
    kept, ref = stint.load_checkpoint(tmp_path / "four"), stint.load_checkpoint(tmp_path / "ref")
    assert kept["step"] == ref["step"] == 10
    for name, t in ref["tracked"]["model"].items():
        assert torch.equal(kept["tracked"]["model"][name], t), name
    codes, outs = run_workers(SCRIPT, late + ["--diverger", "1"], 2, 2, tmp_path / "two", tmp_path / "two")
    assert codes == [3, 3], outs
    for out in outs:  # no majority of two: nothing written, the last agreed checkpoint stays
        assert "model.3.weight differs between worker 0 and worker(s) [1]" in out
        assert "no checkpoint was written" in out
    assert [c.step for c in CheckpointStore(tmp_path / "two").checkpoints()] == []


@pytest.mark.slow
def test_a_divergence_found_at_a_stop_keeps_the_last_agreed_state(tmp_path):
    """Found at the stop's cut: the majority's state is checkpointed (every worker takes it), or,
    with no majority, the previous checkpoint stays the newest; every worker fails naming the tensor."""
    args = ["--diverge-at", "3", "--stop-at", "5", "--check-every", "100", "--checkpoint-every", "3"]
    codes, outs = run_workers(SCRIPT, args + ["--diverger", "2"], 4, 4, tmp_path / "four", tmp_path / "four")
    assert codes == [3] * 4, outs
    for out in outs:
        assert "diverged before step 6: model.0.weight differs between worker 0 and worker(s) [2]" in out
        assert "the checkpoint of step 6 holds the state of the majority, worker(s) [0, 1, 3]" in out
    assert [c.step for c in CheckpointStore(tmp_path / "four").checkpoints()] == [6, 3]
    codes, outs = run_workers(SCRIPT, args, 2, 2, tmp_path / "two", tmp_path / "two")
    assert codes == [3, 3], outs
    for out in outs:
        assert "no checkpoint was written: step 3's is the last agreed state" in out
    assert [c.step for c in CheckpointStore(tmp_path / "two").checkpoints()] == [3]


@pytest.mark.slow
def test_rank_counters_count_the_same_on_every_p_and_across_a_resize(tmp_path):
    """A count made in the micro-batch loop, per logical rank: 40 micro-batches in 10 steps at
    L = 4 on 1 or 2 workers, and across a stop on 2 resumed on 4; the same count in the job's
    (worker 0's) counters, which would depend on P, is flagged. A per-rank sum of sample indices
    reduced by sum, mean, max and min reads the same on every worker and every P, and max > min
    (the ranks' values differ: it is no one worker's count)."""
    reduced = set()
    for workers in (1, 2):
        codes, outs = run_workers(SCRIPT, ["--counts"], workers, 4, None, tmp_path / f"c{workers}")
        assert codes == [0] * workers, outs
        assert all(out.splitlines()[-1].endswith("micro-batches 40") for out in outs), outs
        reduced |= {out.splitlines()[-1].partition(" seen ")[2] for out in outs}
    codes, outs = run_workers(SCRIPT, ["--counts", "--stop-at", "4"], 2, 4, tmp_path / "ck", tmp_path / "a")
    assert codes == [75, 75], outs
    assert outs[0].count("stint: warning: counters['mb'] changed inside the micro-batch loop") == 1
    codes, outs = run_workers(SCRIPT, ["--counts"], 4, 4, tmp_path / "ck", tmp_path / "b")
    assert codes == [0] * 4, outs
    assert all(out.splitlines()[-1].endswith("micro-batches 40") for out in outs), outs
    reduced |= {out.splitlines()[-1].partition(" seen ")[2] for out in outs}
    assert len(reduced) == 1, reduced
    words = reduced.pop().split()  # sum S mean M max X min N micro-batches 40
    total, mean, most, least = int(words[1]), float(words[3]), int(words[5]), int(words[7])
    assert mean == total / 4 and most > least and least * 4 <= total <= most * 4, words


@pytest.mark.slow
def test_overlapped_slices_give_the_bits_of_one_worker_at_l_8(tmp_path):
    """L = 8 sharded on 2 and 4 workers: 4 and 2 time slices, each slice's all_to_all in flight
    while the next is taken (the buffer pairs used in turn, reused from the third slice on)."""
    runs = set()
    for workers, exchange in [(1, "auto"), (2, "sharded"), (4, "sharded")]:
        codes, outs = run_workers(SCRIPT, ["--exchange", exchange], workers, 8, None, tmp_path / f"e{workers}")
        assert codes == [0] * workers, outs
        done = {line.split()[2] for out in outs for line in out.splitlines() if line.startswith("done")}
        logged = tuple(line for line in outs[0].splitlines() if line.startswith("step"))
        assert len(done) == 1 and logged, outs
        runs.add((done.pop(), logged))
    assert len(runs) == 1, runs
