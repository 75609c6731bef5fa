"""singularity and oasis on a typed cluster run once per type (``policies.per_type``): each type's
nodes are a host group with its own tiers, SLA accounting and admission prices; a job limited to
types runs only on those, and its resizes keep its type."""

from __future__ import annotations

import random

import pytest
from typed_helpers import two_type_cluster  # type: ignore[import-not-found]

from stint.model import JobSpec
from stint.model.job import Tier
from stint.perf.scaling import ScalingModel
from stint.perf.types import TypedPerf, TypeSpeeds
from stint.placement.types import alloc_type
from stint.policies import make
from stint.policies.per_type import PerType
from stint.policies.typed import TypeBlind, wrap
from stint.reconcile import Action, ActionKind
from stint.sim.costs import CostModel
from stint.sim.engine import Simulator

OPTIONS = {"oasis": {"slot_s": 10.0, "horizon_slots": 300}, "oasis-replan": {"slot_s": 10.0, "horizon_slots": 300}}
CHOICES = [(), ("v100",), ("k80",), ("v100", "k80")]


def _jobs(seed: int, n: int = 40) -> list[JobSpec]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        req = rng.choice([1, 1, 2, 4])
        elastic = rng.random() < 0.5
        out.append(JobSpec(f"j{i}", t, rng.uniform(20, 200), req, 1 if elastic else req,
                           2 * req if elastic else req, application=rng.choice(["a", "b"]),
                           gpu_types=rng.choice(CHOICES), tier=rng.choice(list(Tier))))
        t += rng.expovariate(1 / 5.0)
    return out


def _sim(policy: object, jobs: list[JobSpec], seen: list[tuple[float, Action]]) -> Simulator:
    cluster = two_type_cluster()
    speeds = TypeSpeeds({("a", "k80"): 0.25}, {"k80": 0.5})
    return Simulator(cluster, jobs, policy, TypedPerf(ScalingModel(), cluster, speeds),  # type: ignore[arg-type]
                     CostModel.free(), on_action=lambda t, a: seen.append((t, a)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["singularity", "oasis", "oasis-replan"])
def test_each_job_keeps_to_its_types_and_one_type_over_a_random_workload(name: str) -> None:
    cluster = two_type_cluster()
    policy = wrap(make(name, **OPTIONS.get(name, {})), cluster)
    assert isinstance(policy, PerType)
    for seed in ((3, 4, 5) if name == "singularity" else (3,)):
        jobs = _jobs(seed, 40 if name == "singularity" else 16)
        specs = {j.job_id: j for j in jobs}
        seen: list[tuple[float, Action]] = []
        res = _sim(wrap(make(name, **OPTIONS.get(name, {})), cluster), jobs, seen).run()
        assert not res.refusals, res.refusals
        home: dict[str, str] = {}
        resized = 0
        for t, a in seen:
            kind = alloc_type(cluster, a.after)
            if not a.after:
                continue
            assert kind != "*mixed*" and specs[a.job_id].allows_type(kind), (name, t, a)
            assert home.setdefault(a.job_id, kind) == kind, (name, t, a)  # one type for its life
            if a.kind is ActionKind.RESIZE:
                resized += 1
        if name == "singularity":
            assert sum(r.completed for r in res.records) == len(jobs)
            assert resized, "no resize exercised"
        else:
            assert sum(r.completed for r in res.records) > len(jobs) // 2


def test_a_premium_job_takes_gpus_only_from_jobs_of_its_own_type() -> None:
    """v100 is full of standard jobs, k80 of basic ones; a premium job limited to v100 reclaims
    from v100 jobs only, though basic jobs come first in the victim order: stopping a k80 job
    would free GPUs it cannot use."""
    cluster = two_type_cluster()
    basic = [JobSpec(f"{t}{i}", 0.0, 5000.0, 4, 4, 4, gpu_types=(t,), tier=tier)
             for t, tier in (("v100", Tier.STANDARD), ("k80", Tier.BASIC)) for i in range(2)]
    premium = JobSpec("p", 100.0, 200.0, 4, 4, 4, gpu_types=("v100",), tier=Tier.PREMIUM)
    seen: list[tuple[float, Action]] = []
    res = _sim(wrap(make("singularity"), cluster), [*basic, premium], seen).run()
    stopped = {a.job_id for _, a in seen if a.kind is ActionKind.PREEMPT}
    assert stopped and all(j.startswith("v100") for j in stopped), stopped
    (p,) = [r for r in res.records if r.job_id == "p"]
    assert p.completed and p.jct_s < 400.0


def test_singularity_runs_per_type_and_type_blind_policies_are_repaired() -> None:
    assert isinstance(wrap(make("singularity"), two_type_cluster()), PerType)
    assert isinstance(wrap(make("tiresias"), two_type_cluster()), TypeBlind)


def test_a_job_that_may_grow_past_one_types_gpus_runs_on_one_type() -> None:
    """Up to 16 GPUs on a cluster of two 8-GPU types: singularity sizes it within its type's
    group (its largest size there, 8), as a job larger than one type's nodes may be."""
    cluster = two_type_cluster()
    big = JobSpec("big", 0.0, 300.0, 4, 1, 16, tier=Tier.PREMIUM)
    seen: list[tuple[float, Action]] = []
    res = _sim(wrap(make("singularity"), cluster), [big], seen).run()
    assert [r.completed for r in res.records] == [True]
    assert seen and all(alloc_type(cluster, a.after) != "*mixed*" for _, a in seen if a.after)
    assert max(a.after.num_workers for _, a in seen) <= 8
