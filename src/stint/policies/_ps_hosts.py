"""Shared by the paper's parameter-server baselines (fifo-fixed, drf-ps, rrh, dorm): DRF's
dominant share over both host groups and progressive filling, on the round-robin placement of
``placement/round_robin.py``."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from stint.model.allocation import Allocation
from stint.model.job import JobSpec
from stint.placement.round_robin import FreeCapacity, demand


def dominant_share(spec: JobSpec, totals_w: np.ndarray, totals_p: np.ndarray) -> float:
    """DRF's dominant share of one worker plus its b/B share of a PS, over both host groups."""
    shares = np.divide(demand(spec), totals_w, out=np.zeros(4), where=totals_w > 0)
    if spec.ps_demand is not None and spec.ps_demand.net_gbps > 0:
        ratio = spec.worker_demand.net_gbps / spec.ps_demand.net_gbps
        shares = np.concatenate([shares, ratio * np.divide(
            demand(spec, True), totals_p, out=np.zeros(4), where=totals_p > 0)])
    return float(shares.max())


def drf_fill(specs: Sequence[JobSpec], free: FreeCapacity) -> dict[str, Allocation]:
    """DRF progressive filling: repeatedly give one more worker to the job with the lowest
    dominant share (ties: arrival order) until no job can grow; tasks placed round-robin."""
    tw, tp = free.totals(False), free.totals(True)
    per = [dominant_share(s, tw, tp) for s in specs]
    heap = [(0.0, i) for i in range(len(specs))]
    workers: list[dict[int, int]] = [{} for _ in specs]
    ps: list[dict[int, int]] = [{} for _ in specs]
    while heap:
        share, i = heapq.heappop(heap)
        s = specs[i]
        if sum(workers[i].values()) < s.max_workers and free.grow(s, workers[i], ps[i]):
            heapq.heappush(heap, (share + per[i], i))
    return {s.job_id: Allocation.of(workers[i], ps[i]) for i, s in enumerate(specs)}
