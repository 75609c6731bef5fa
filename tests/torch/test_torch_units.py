"""Pure pieces: checkpoint interval policy, sampler, environment parsing, launcher exit codes."""

from __future__ import annotations

import math

import pytest
import torch

from stint.torch import Interval, JobEnvError, Sampler, daly_interval, read_env, young_interval
from stint.torch.launch import combined_code


def test_young_and_daly_intervals():
    # Young: sqrt(2 * 10 s * 3600 s) = sqrt(72000) = 268.33 s.
    assert young_interval(10, 3600) == pytest.approx(268.328, abs=1e-3)
    # Daly: r = 10 / 7200; T = 268.33 * (1 + sqrt(r)/3 + r/9) - 10 = 268.33 * 1.012577 - 10 = 261.70.
    assert daly_interval(10, 3600) == pytest.approx(268.328 * (1 + math.sqrt(10 / 7200) / 3 + 10 / 64800) - 10)
    assert daly_interval(10, 3600) == pytest.approx(261.70, abs=0.01)
    assert daly_interval(100, 40) == 40  # cost >= 2 * MTBF: checkpoint every MTBF


@pytest.mark.parametrize(
    ("interval", "steps_since", "seconds_since", "cost", "due"),
    [
        (Interval(), 10**6, 1e9, 1.0, False),  # no periodic checkpoints
        (Interval(steps=5), 4, 0.0, None, False),
        (Interval(steps=5), 5, 0.0, None, True),
        (Interval(seconds=60), 1, 59.9, None, False),
        (Interval(seconds=60), 1, 60.0, None, True),
        (Interval(mtbf=3600), 1, 0.0, None, True),  # cost not measured yet: checkpoint to measure it
        (Interval(mtbf=3600), 1, 261.0, 10.0, False),  # Daly interval 261.70 s (above)
        (Interval(mtbf=3600), 1, 262.0, 10.0, True),
    ],
)
def test_interval_due(interval, steps_since, seconds_since, cost, due):
    assert interval.due(steps_since, seconds_since, cost) is due


def test_interval_rejects_non_positive_values():
    with pytest.raises(ValueError, match="Interval.steps=0"):
        Interval(steps=0)


def test_sampler_is_a_pure_function_of_seed_and_step():
    a, b = Sampler(100, 20, seed=3), Sampler(100, 20, seed=3)
    for step in (7, 0, 12, 7):  # any order: no hidden position
        assert torch.equal(a.global_batch(step), b.global_batch(step))
    epoch0 = torch.cat([a.global_batch(s) for s in range(5)])
    assert sorted(epoch0.tolist()) == list(range(100))  # one epoch = a permutation
    assert not torch.equal(a.global_batch(0), a.global_batch(5))  # reshuffled next epoch
    assert not torch.equal(a.global_batch(0), Sampler(100, 20, seed=4).global_batch(0))


def test_sampler_shards_partition_the_global_batch():
    s = Sampler(64, 16, seed=0)
    shards = [s.shard(9, lr, 4) for lr in range(4)]
    assert torch.equal(torch.cat(shards), s.global_batch(9))
    with pytest.raises(ValueError, match="not divisible by the 3 logical ranks"):
        s.shard(0, 0, 3)


def test_env_defaults_to_one_worker_hosting_every_logical_rank():
    env = read_env({}, logical_world_size=4)
    assert (env.rank, env.world_size, env.logical_world_size, env.logical_ranks) == (0, 1, 4, (0, 1, 2, 3))
    assert env.ckpt_dir is None and env.status_file is None


def test_env_from_the_executor_contract():
    env = read_env({"STINT_RANK": "1", "STINT_WORLD_SIZE": "2", "STINT_LOGICAL_WORLD_SIZE": "4",
                    "STINT_CKPT_DIR": "/ck", "STINT_MASTER_PORT": "1234", "STINT_JOB_ID": "j7"},
                   logical_world_size=8, ckpt_dir="/ignored")
    assert env.logical_ranks == (1, 3) and env.logical_world_size == 4  # the environment wins; round-robin
    assert str(env.ckpt_dir) == "/ck" and env.master_port == 1234 and env.job_id == "j7"
    moved = read_env({"STINT_RANK": "0", "STINT_WORLD_SIZE": "2", "STINT_LOGICAL_WORLD_SIZE": "4",
                      "STINT_LOGICAL_RANKS": "3,1"})
    assert moved.logical_ranks == (3, 1)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"STINT_WORLD_SIZE": "3", "STINT_LOGICAL_WORLD_SIZE": "4"}, "must be >= 1 and divide"),
        ({"STINT_WORLD_SIZE": "2", "STINT_RANK": "2", "STINT_LOGICAL_WORLD_SIZE": "2"}, "outside"),
        ({"STINT_RANK": "x"}, "STINT_RANK='x' is not an integer"),
        ({"STINT_LOGICAL_WORLD_SIZE": "2", "STINT_LOGICAL_RANKS": "0,0"}, "distinct logical ranks"),
    ],
)
def test_env_errors_name_the_variable(environ, message):
    with pytest.raises(JobEnvError, match=message):
        read_env(environ)


@pytest.mark.parametrize(
    ("codes", "combined"),
    [([0, 0], 0), ([75, 75], 75), ([75, 0], 75), ([75, 1], 1), ([-9, 75], 137)],
)
def test_launcher_combines_exit_codes(codes, combined):
    assert combined_code(codes) == combined


def test_the_launcher_returns_the_first_failing_workers_code():
    """Worker 1 fails with 3; the launcher then terminates worker 0 (exit by SIGTERM, 143)."""
    import sys

    from stint.torch import launch

    code = "import os, sys, time; sys.exit(3) if os.environ['STINT_RANK'] == '1' else time.sleep(60)"
    procs = launch.start([sys.executable, "-c", code], 2, 2, None)
    assert launch.wait(procs) == 3
    assert procs[0].poll() == -15


def test_rank_reductions_fold_in_rank_order():
    from stint.torch.job import reduce_in_rank_order

    assert [reduce_in_rank_order([3, 1, 4, 1], h) for h in ("sum", "mean", "max", "min")] == [9, 2.25, 4, 1]
    # float sums depend on the order: the fold is left to right, rank 0 first
    vals = [1e16, 1.0, -1e16, 1.0]
    assert reduce_in_rank_order(vals, "sum") == ((1e16 + 1.0) + -1e16) + 1.0
    t = [torch.tensor([1.0, 5.0]), torch.tensor([3.0, 2.0])]
    assert reduce_in_rank_order(t, "max").tolist() == [3.0, 5.0]
    assert reduce_in_rank_order(t, "min").tolist() == [1.0, 2.0]
    assert reduce_in_rank_order(t, "mean").tolist() == [2.0, 3.5]


def test_a_rank_reduction_by_hand_names_what_is_wrong(tmp_path, monkeypatch):
    import stint.torch as stint

    for k in [k for k in __import__("os").environ if k.startswith("STINT_")]:
        monkeypatch.delenv(k)
    model = torch.nn.Linear(2, 1)
    job = stint.init(model=model, logical_world_size=3, rank_counters={"seen": 0})
    for step in job.steps(2):
        for lr in job.logical_ranks():
            job.rank_counters["seen"] += 10 * lr + step
    assert [job.rank_counters_reduce("seen", h) for h in ("sum", "mean", "max", "min")] == [63, 21.0, 41, 1]
    assert job.rank_counters_total("seen") == 63
    with pytest.raises(ValueError, match=r"how='median' must be one of \['sum', 'mean', 'max', 'min'\]"):
        job.rank_counters_reduce("seen", "median")
    with pytest.raises(KeyError, match="'mb' is not one of"):
        job.rank_counters_reduce("mb")


@pytest.mark.parametrize("option, message", [
    ({"exchange": "ring"}, r"exchange='ring' must be one of \['auto', 'gathered', 'sharded'\]"),
    ({"check_every": 0}, r"check_every=0 must be a positive number of steps"),
    ({"keep": 0}, r"keep=0 must be at least 1"),
    ({"logical_world_size": 0}, r"logical_world_size=0 must be a positive number of logical ranks"),
    ({"interval": 10}, r"interval=10 must be a stint.Interval"),
])
def test_a_bad_init_option_is_an_error_naming_it(option, message, monkeypatch):
    import stint.torch as stint

    for k in [k for k in __import__("os").environ if k.startswith("STINT_")]:
        monkeypatch.delenv(k)
    with pytest.raises((ValueError, TypeError), match=r"^stint.init: " + message):
        stint.init(model=torch.nn.Linear(2, 1), **option)


def test_the_job_holds_its_options_as_given_and_a_copy_of_the_rank_counters(monkeypatch):
    import stint.torch as stint

    for k in [k for k in __import__("os").environ if k.startswith("STINT_")]:
        monkeypatch.delenv(k)
    start = {"seen": 0}
    job = stint.init(model=torch.nn.Linear(2, 1), seed=7, logical_world_size=2, check_every=None,
                     rank_counters=start)
    start["seen"] = 99  # the caller's dict, changed after init: the job's start values are its own
    assert job.options == stint.JobOptions(seed=7, logical_world_size=2, check_every=None,
                                           rank_counters={"seen": 0})
    for _ in job.steps(1):
        for _ in job.logical_ranks():
            job.rank_counters["seen"] += 1
    assert job.rank_counters_total("seen") == 2 and job.options.rank_counters == {"seen": 0}
