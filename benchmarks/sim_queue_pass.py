"""One scheduling pass over 10,000 queued jobs (the control plane's budget is 1 s).

Builds a view with 10,000 queued jobs and a full 512-GPU cluster minus a few free GPUs, as the
live control plane would: without ``by_id`` (so the policy rebuilds its index from scratch), then
the following incremental pass after one arrival. Usage: .venv/bin/python benchmarks/sim_queue_pass.py
"""

from __future__ import annotations

import time

from stint.model import Allocation, Cluster, JobSpec
from stint.perf.scaling import ScalingModel
from stint.policies import make
from stint.policies.base import ClusterView, JobStatus, Phase


def main(n: int = 10_000) -> None:
    cluster = Cluster.uniform(64, 8)
    running = [JobStatus(JobSpec(f"r{i}", 0.0, 1e6), Phase.RUNNING, Allocation.of({i // 8: 1}), as_of_s=0.0)
               for i in range(508)]
    queued = [JobStatus(JobSpec(f"q{i}", 1.0 + i, 100.0 + i % 977, 1 + (i % 7 == 0), 1 + (i % 7 == 0),
                                1 + (i % 7 == 0)), as_of_s=1.0 + i) for i in range(n)]
    jobs = running + queued
    free = [0] * 63 + [4]
    for name in ("fifo", "sjf", "srtf", "drf", "tiresias", "optimus"):
        policy = make(name)
        view = ClusterView(now=20_000.0, cluster=cluster, jobs=jobs, free_gpus=free, perf=ScalingModel())
        t0 = time.perf_counter()
        plan = policy.plan(view)
        full = time.perf_counter() - t0
        table = {st.job_id: st for st in jobs}
        inc_view = ClusterView(now=20_001.0, cluster=cluster, jobs=jobs, free_gpus=free, perf=ScalingModel(),
                               changed=[], by_id=table, stream=1)
        policy.plan(inc_view)  # first pass on this stream builds the index
        t0 = time.perf_counter()
        policy.plan(ClusterView(now=20_002.0, cluster=cluster, jobs=jobs, free_gpus=free, perf=ScalingModel(),
                                changed=[queued[-1].job_id], by_id=table, stream=1))
        inc = time.perf_counter() - t0
        print(f"{name:9} full pass {full * 1e3:8.1f} ms   incremental pass {inc * 1e3:7.3f} ms   "
              f"({len(plan.allocations)} started/changed)")


if __name__ == "__main__":
    main()
