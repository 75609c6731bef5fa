"""The adapter between store rows and the policy interface: ``JobSpec`` and ``JobStatus``.

A live job's status carries what a simulated one does: times on the store's own clock
(``Store.epoch`` is 0), its length (``est_s``, declared; ``LIVE_DEFAULT_WORK_S`` if not), the
worker counts it can run on, and progress that grows while it holds GPUs (``as_of_s``/``rate``:
the same lazy progress as the simulator's, read through ``work_done_at``/``attained_gpu_s_at``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stint.model.allocation import EMPTY, Allocation
from stint.model.cluster import Cluster, Node
from stint.model.job import JobSpec, Tier, divisor_counts
from stint.model.resources import Resources
from stint.model.utility import ConstantUtility, DeadlineUtility, Utility
from stint.perf.model import PerfModel
from stint.policies.base import JobStatus, Phase
from stint.runtime.executor.base import NODE_NET_GBPS, NodeInfo, node_resources
from stint.runtime.states import HOLDING
from stint.runtime.store import load_alloc
from stint.runtime.tables import Job

# A job that declares no length counts as this many seconds of work at its requested size.
LIVE_DEFAULT_WORK_S = 600.0
# A parameter server's demand when the submitter states none (``stint submit --ps-cpus/--ps-mem-gb``).
PS_CPUS, PS_MEM_GB = 1.0, 1.0


def cluster_of(nodes: list[tuple[str, int]], types: Sequence[str] = ()) -> Cluster:
    """The cluster of ``nodes`` (name, GPUs), typed by ``types`` (one per node) when given."""
    kinds = list(types) or [""] * len(nodes)
    return Cluster(tuple(Node(name, Resources(gpu=gpus), gpu_type=t)
                         for (name, gpus), t in zip(nodes, kinds, strict=True)))


def live_cluster(infos: Sequence[NodeInfo]) -> Cluster:
    """The executor's nodes as policies see them: GPUs, CPU cores, memory and bandwidth
    (``node_resources``, ``NODE_NET_GBPS``), role and type (untyped unless every node names one)."""
    typed = any(n.gpu_type for n in infos)
    out = []
    for n in infos:
        cpus, mem = node_resources(n)
        out.append(Node(n.name, Resources(gpu=n.slots, cpu=cpus, mem_gb=mem, net_gbps=NODE_NET_GBPS),
                        role=n.role, gpu_type=n.gpu_type if typed else ""))
    return Cluster(tuple(out))


def ps_capable(roles: Sequence[str]) -> bool:
    """Whether a cluster of nodes of these roles can host parameter servers: a node of role
    "ps" or "any" (``placement.round_robin.ps_hosts``)."""
    return any(r in ("ps", "any") for r in roles)


_TIERS = {str(t): t for t in Tier}  # Tier(value) is slow enough to matter for 10,000 jobs
_HOLDING = frozenset(str(s) for s in HOLDING)
_ONE_GPU = Resources(gpu=1)


def worker_counts(gpus: int, min_gpus: int, max_gpus: int, logical: int | None) -> tuple[int, ...]:
    """The worker counts a job can run on. Every worker's ``STINT_LOGICAL_WORLD_SIZE`` is the
    job's logical ranks (``logical``, else ``max_gpus``), and an SDK job needs a count that
    divides it; a job that declares nothing is held to that too, as it may use the SDK."""
    return divisor_counts(logical or max_gpus, min_gpus, max_gpus)


def logical_world_size(job: Job) -> int:
    return job.logical_ranks or job.max_gpus


def ps_demands(job: Job) -> tuple[Resources, Resources | None]:
    """A job's worker and PS demands. A parameter-server job (``ps_count`` P at ``gpus`` W
    workers) has workers of one GPU and 1 Gbit/s and PSs of ``ps_cpus`` cores, ``ps_mem_gb``
    GiB and W/P Gbit/s, so that a policy's PS count for y workers, ``ceil(y b/B)``, is P at W
    (OASiS's constraint (6)); any other job: one GPU a worker, no PSs."""
    d = job.__dict__
    ps = d.get("ps_count")
    if not ps:
        return _ONE_GPU, None
    return (Resources(gpu=1, net_gbps=1.0),
            Resources(cpu=d.get("ps_cpus") or PS_CPUS, mem_gb=d.get("ps_mem_gb") or PS_MEM_GB,
                      net_gbps=d["gpus"] / ps))


def ps_bounds(job: Job) -> tuple[int, int]:
    """The PS counts a parameter-server job may run with (``min_ps``..``max_ps``; 0..0: none)."""
    d = job.__dict__
    ps = d.get("ps_count")
    if not ps:
        return 0, 0
    return d.get("min_ps") or ps, d.get("max_ps") or ps


def spec_of(job: Job, user: str, epoch: float) -> JobSpec:
    # Read the loaded column values straight from the instance dict: the ORM's attribute
    # descriptors cost more than the rest of this function for a 10,000-job pass.
    d = job.__dict__
    utility: Utility = ConstantUtility(d["priority"])
    if d["deadline_s"] is not None:
        utility = DeadlineUtility(d["priority"], d["deadline_s"])
    est = d["est_s"]
    # An operator's pin of the worker count (``stint resize``) is the size the policy plans it at.
    pin = d.get("pin_workers")  # (absent from a row built in this process and never loaded)
    gpus, low, high = (pin, pin, pin) if pin else (d["gpus"], d["min_gpus"], d["max_gpus"])
    worker, ps = ps_demands(job)
    min_ps, max_ps = ps_bounds(job)
    return JobSpec(
        job_id=str(d["id"]),
        arrival_s=max(0.0, d["submitted_at"] - epoch),
        work=est if est else LIVE_DEFAULT_WORK_S,
        requested_workers=gpus,
        min_workers=low,
        max_workers=high,
        worker_demand=worker,
        ps_demand=ps,
        min_ps=min_ps,
        max_ps=max_ps,
        application=d["name"] or "job",
        utility=utility,
        priority=d["priority"],
        tier=_TIERS[d["tier"]],
        user=user,
        duration_s=est,
        worker_counts=worker_counts(gpus, low, high, d["logical_ranks"]),
        gpu_types=tuple(t for t in (d.get("gpu_types") or "").split(",") if t),
    )


def logical_allocation(job: Job) -> Allocation:
    """What the job holds as far as policies and the capacity ledger are concerned: its target
    while it waits to (re)launch or checkpoints for a resize or migration; nothing once it is
    being stopped for good; else what it holds."""
    d = job.__dict__
    if d["target"]:
        return load_alloc(d["target"])
    if d["state"] in _HOLDING and not d["stop_purpose"]:
        return load_alloc(d["allocation"])
    return EMPTY


def finishing(report: Mapping[str, Any] | None, total_steps: int | None) -> bool:
    """Whether the SDK's ``report`` says the job is at its last step or past it: its state is
    ``finished``, or ``step + 1`` has reached its total (the report's own ``total_steps``, else
    the declared one). A stop would then save at most one step (and cost a relaunch); past
    the loop the SDK ignores it and the job ends as succeeded."""
    if not report:
        return False
    if report.get("state") == "finished":
        return True
    step, total = report.get("step"), report.get("total_steps") or total_steps
    return isinstance(step, int) and isinstance(total, int) and step + 1 >= total > 0


def status_of(job: Job, user: str, epoch: float, perf: PerfModel,
              report: Mapping[str, Any] | None = None, now: float = 0.0) -> JobStatus:
    """The job as a policy sees it. ``report`` is the SDK's last progress report (its ``step``
    counts against a declared ``total_steps``); ``now`` is the store-clock time it is read at."""
    d = job.__dict__
    spec = spec_of(job, user, epoch)
    alloc = logical_allocation(job)
    phase = Phase.RUNNING if alloc else Phase.QUEUED if d["attempt"] == 0 else Phase.PAUSED
    work, attained, as_of, rate = d["work_done"], d["attained_gpu_s"], None, 0.0
    if d["state"] in _HOLDING and d["holding_since"] is not None:
        held = load_alloc(d["allocation"])
        as_of, rate = d["holding_since"] - epoch, perf.rate(spec, held)
        step, total = (report or {}).get("step"), d["total_steps"]
        if total and isinstance(step, int) and now > as_of:  # the SDK's own count, as of now
            attained += held.num_workers * (now - as_of)
            work, as_of = spec.work * min(step, total) / total, now
    return JobStatus(
        spec=spec,
        phase=phase,
        allocation=alloc,
        work_done=min(work, spec.work),
        attained_gpu_s=attained,
        first_start_s=d["first_start_at"] - epoch if d["first_start_at"] is not None else None,
        last_change_s=d["last_change_at"] - epoch,
        preemptions=d["preemptions"],
        rate=rate,
        as_of_s=as_of,
        finishing=d["state"] in _HOLDING and finishing(report, d["total_steps"]),
    )


def held_slots(job: Job) -> dict[int, list[int]]:
    return {int(k): v for k, v in json.loads(job.slots or "{}").items()}
