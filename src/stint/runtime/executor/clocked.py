"""An executor on a simulated clock: no processes, jobs advance at a performance model's rate.

For replaying a workload through the real ``Controller`` deterministically (the parity test of
simulated and live enactment, the forecast accuracy benchmark): an attempt progresses at
``perf.rate(spec, workers)`` from its launch; it succeeds when its work is done, checkpoints at
once when asked to stop (its progress kept), and stops without a checkpoint when a node it runs
on fails (``failures``): one of its workers' or of its parameter servers' (tasks of role
``STINT_ROLE=ps``, which hold no slot). The caller moves ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stint.model.allocation import Allocation
from stint.model.job import JobSpec
from stint.perf.model import PerfModel
from stint.runtime.executor.base import JobExit, NodeInfo, Outcome, WorkerLaunch
from stint.sim.engine import NodeFailure


@dataclass
class _Attempt:
    job_id: str
    attempt: int
    allocation: Allocation  # its workers and parameter servers
    started: float
    stop: Outcome | None = None


@dataclass
class ClockedExecutor:
    """An ``Executor`` on a simulated clock (module docstring); nodes are ``node-<i>``."""

    node_slots: list[int]
    specs: Mapping[str, JobSpec]
    perf: PerfModel
    failures: Sequence[NodeFailure] = ()
    # The nodes with their roles, cores and memory (named ``node-<i>``); none: ``node_slots``'s
    # plain nodes (role "any", cores and memory by their slots).
    node_infos: Sequence[NodeInfo] = ()
    now: float = 0.0
    done: dict[str, float] = field(default_factory=dict)  # job -> work done by ended attempts
    live: dict[str, _Attempt] = field(default_factory=dict)
    ended: list[JobExit] = field(default_factory=list)
    launched: list[tuple[str, Allocation]] = field(default_factory=list)  # every attempt, in order

    def nodes(self) -> list[NodeInfo]:
        return list(self.node_infos) or [NodeInfo(f"node-{i}", s) for i, s in enumerate(self.node_slots)]

    def launch(self, workers: Sequence[WorkerLaunch]) -> None:
        w = workers[0]
        counts: dict[bool, dict[int, int]] = {False: {}, True: {}}  # is a PS -> node -> tasks
        for x in workers:
            node, ps = int(x.node.removeprefix("node-")), x.env.get("STINT_ROLE") == "ps"
            counts[ps][node] = counts[ps].get(node, 0) + 1
        if w.job_id not in self.live:
            alloc = Allocation.of(counts[False], counts[True])
            self.live[w.job_id] = _Attempt(w.job_id, w.attempt, alloc, self.now)
            self.launched.append((w.job_id, alloc))

    def request_stop(self, job_id: str, grace_s: float = 0.0) -> None:
        if job_id in self.live:
            self.live[job_id].stop = Outcome.CHECKPOINTED

    def kill(self, job_id: str) -> None:
        if job_id in self.live:
            self.live[job_id].stop = Outcome.STOPPED

    def down_nodes(self) -> frozenset[str]:
        return frozenset(f"node-{f.node}" for f in self.failures
                         if f.down_s <= self.now < f.up_s)

    def _rate(self, a: _Attempt) -> float:
        return self.perf.rate(self.specs[a.job_id], a.allocation)

    def finish_time(self, a: _Attempt) -> float:
        left = self.specs[a.job_id].work - self.done.get(a.job_id, 0.0)
        rate = self._rate(a)
        return a.started + left / rate if rate > 0 else math.inf

    def next_event(self) -> float:
        times = [self.now if a.stop else self.finish_time(a) for a in self.live.values()]
        times += [t for f in self.failures for t in (f.down_s, f.up_s) if t > self.now]
        return min(times, default=math.inf)

    def poll(self) -> list[JobExit]:
        out = []
        down = {int(n.removeprefix("node-")) for n in self.down_nodes()}
        for a in self.live.values():  # a node that fails stops its attempts (no checkpoint)
            held = set(a.allocation.nodes) | {n for n, _ in a.allocation.ps}
            if a.stop is None and down & held:
                a.stop = Outcome.STOPPED
        for jid, a in list(self.live.items()):
            finish = self.finish_time(a)
            if a.stop is None and finish > self.now + 1e-9:
                continue
            self.done[jid] = self.done.get(jid, 0.0) + self._rate(a) * (min(finish, self.now) - a.started)
            outcome = Outcome.SUCCEEDED if a.stop is None else a.stop
            code = {Outcome.SUCCEEDED: 0, Outcome.CHECKPOINTED: 75}.get(outcome, -9)
            tasks = a.allocation.num_workers + a.allocation.num_ps
            out.append(JobExit(jid, a.attempt, outcome, {r: code for r in range(tasks)}, str(outcome),
                               self.now))
            del self.live[jid]
        self.ended += out
        return out

    def running(self) -> dict[str, int]:
        return {j: a.attempt for j, a in self.live.items()}

    def exit_of(self, job_id: str, attempt: int) -> JobExit | None:
        return next((e for e in self.ended if e.job_id == job_id and e.attempt == attempt), None)

    def status(self, job_id: str) -> Mapping[str, Any] | None:
        return None

    def close(self) -> None:
        pass
