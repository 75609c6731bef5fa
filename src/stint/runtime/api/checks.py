"""The checks of a submission (``POST /v1/jobs``, its dry run, ``POST /v1/arrays``): who may run
jobs and as which account, the job's shape against the cluster, and the per-user limits. The
names are the package's own (its routers share them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fastapi import HTTPException

from stint.config import UserLimits, format_size
from stint.model.job import Tier
from stint.runtime.accounts import refusal
from stint.runtime.api.context import ApiSettings
from stint.runtime.api.errors import unprocessable
from stint.runtime.schemas import JobIn, type_refusal
from stint.runtime.store import Caller, NewJob
from stint.runtime.view import PS_CPUS, PS_MEM_GB, worker_counts


def _run_as(who: Caller, settings: ApiSettings) -> str | None:
    """The OS account ``who``'s jobs run as (None: the control plane's own, single-user mode
    only), or 403: in multi-user mode a user without an account, or a non-admin whose account
    is root, runs nothing (``accounts.refusal``)."""
    if not settings.multi_user:
        if who.os_user not in (None, settings.own_account):
            raise HTTPException(403, f"single-user mode: this control plane runs every job as "
                                f"{settings.own_account!r}, not as {who.os_user!r}")
        return None
    why = refusal(who.name, who.os_user, who.is_admin)
    if why is not None:
        raise HTTPException(403, why)
    return who.os_user


def _check_limits(spec: NewJob, usage: tuple[int, int], limits: UserLimits, key: str) -> None:
    """The per-user limits (config key ``key``): 403 for a tier the user may not submit to,
    429 past the number of unfinished jobs, 422 naming the field past the GPUs, the command
    size or a bound of the job (memory, processes, time limit)."""
    if Tier(spec.tier) not in limits.tiers:
        allowed = ", ".join(t.value for t in limits.tiers)
        raise HTTPException(403, f"tier {spec.tier} is not allowed for you: your limit "
                            f"({key}.tiers) allows {allowed}")
    jobs, gpus = usage
    if jobs >= limits.max_jobs:
        raise HTTPException(429, f"you have {jobs} unfinished jobs, the most a user may have "
                            f"({key}.max_jobs = {limits.max_jobs})")
    if limits.max_gpus is not None and gpus + spec.max_gpus > limits.max_gpus:
        raise unprocessable("max_gpus", f"your unfinished jobs may use {gpus} GPUs; this one "
                            f"{spec.max_gpus} more would pass your limit of {limits.max_gpus}")
    size = sum(len(a.encode()) + 1 for a in spec.command)
    if size > limits.max_command_bytes:
        raise unprocessable("command", f"command takes {size} bytes; the most a job may have "
                            f"here is {limits.max_command_bytes}")
    _check_bounds(spec, limits, key)


def _check_array_limits(spec: NewJob, tasks: int, usage: tuple[int, int], limits: UserLimits,
                        key: str) -> None:
    """The per-user limits for ``tasks`` jobs of ``spec`` at once (``_check_limits``)."""
    jobs, gpus = usage
    if jobs + tasks > limits.max_jobs:
        raise HTTPException(429, f"you have {jobs} unfinished jobs; {tasks} more would pass the "
                            f"most a user may have ({key}.max_jobs = {limits.max_jobs})")
    _check_limits(spec, (jobs + tasks - 1, gpus + (tasks - 1) * spec.max_gpus), limits, key)


def _check_bounds(spec: NewJob, limits: UserLimits, key: str) -> None:
    """A bound the job asks for within the user's maximum (a 422 naming the field, the
    maximum and the config key that sets it)."""
    asked: list[tuple[str, float | None, float | None, str, Callable[[float], str]]] = [
        ("memory_max", spec.memory_max, limits.job_memory_max, "job_memory_max",
         lambda v: format_size(int(v))),
        ("pids_max", spec.pids_max, limits.job_pids_max, "job_pids_max", lambda v: f"{v:g}"),
        ("time_limit_s", spec.time_limit_s, limits.max_time_limit_s, "max_time_limit_s",
         lambda v: f"{v:g} s")]
    for name, value, most, limit_key, shown in asked:
        if value is not None and most is not None and value > most:
            raise unprocessable(name, f"{name} ({shown(value)}) is more than the most a job of "
                                f"yours may have: {shown(most)} ({key}.{limit_key})")


def _check_ps(body: JobIn, hosts: Sequence[tuple[str, float, float]]) -> None:
    """A parameter-server job's fields: the PS count within its bounds, PS-only fields only
    with ``ps``, and a node that can host one PS (role "ps" or "any", its cores and memory)."""
    given = (("min_ps", body.min_ps), ("max_ps", body.max_ps), ("ps_cpus", body.ps_cpus),
             ("ps_mem_gb", body.ps_mem_gb))
    extra = [name for name, value in given if value is not None]
    if body.ps is None:
        if extra:
            raise unprocessable(extra[0], f"{extra[0]} is for a parameter-server job: give ps too")
        return
    lo = body.min_ps if body.min_ps is not None else min(body.ps, body.max_ps or body.ps)
    hi = body.max_ps if body.max_ps is not None else max(body.ps, lo)
    if lo > hi:
        raise unprocessable("min_ps", f"min_ps ({lo}) must be <= max_ps ({hi})")
    if not lo <= body.ps <= hi:
        raise unprocessable("ps", f"ps ({body.ps}) must lie in min_ps..max_ps ({lo}..{hi})")
    capable = [(c, m) for role, c, m in hosts if role in ("ps", "any")]
    if hosts and not capable:
        raise unprocessable("ps", "the cluster has no node that hosts parameter servers (role "
                            "\"ps\" or \"any\"); submit the job without --ps")
    cpus, mem = body.ps_cpus or PS_CPUS, body.ps_mem_gb or PS_MEM_GB
    stated = [(c, m) for c, m in capable if c or m]  # (a node recorded without them: any)
    if stated and len(stated) == len(capable) and not any(cpus <= c and mem <= m for c, m in stated):
        field = "ps_cpus" if not any(cpus <= c for c, _ in capable) else "ps_mem_gb"
        raise unprocessable(field, f"no node that hosts parameter servers has {cpus:g} cores "
                            f"and {mem:g} GiB for one (the most: "
                            f"{max(c for c, _ in stated):g} cores, {max(m for _, m in stated):g} GiB)")


def _check_job(body: JobIn, node_gpus: dict[str, int], os_user: str | None = None,
               type_gpus: dict[str, int] | None = None,
               hosts: Sequence[tuple[str, float, float]] = ()) -> NewJob:
    """Cross-field and cluster checks of a submission; a 422 names the offending field."""
    _check_ps(body, hosts)
    gpus, lo, hi = body.bounds()
    if lo > hi:
        raise unprocessable("min_gpus", f"min_gpus ({lo}) must be <= max_gpus ({hi})")
    if not lo <= gpus <= hi:
        raise unprocessable("gpus", f"gpus ({gpus}) must lie in min_gpus..max_gpus ({lo}..{hi})")
    total = sum(node_gpus.values())
    if hi > total:
        field = "max_gpus" if body.max_gpus is not None else "gpus"
        raise unprocessable(field, f"{field} ({hi}) is more than the cluster's {total} GPUs")
    refusal = type_refusal(body.gpu_types, hi, type_gpus) if type_gpus is not None else None
    if refusal:
        raise unprocessable("gpu_types", refusal)
    logical = body.logical_ranks or hi
    if logical < hi:
        raise unprocessable("logical_ranks", f"logical_ranks ({logical}) must be at least "
                            f"max_gpus ({hi}): a worker hosts one or more logical ranks")
    counts = worker_counts(gpus, lo, hi, body.logical_ranks)
    if gpus not in counts:
        raise unprocessable("gpus", f"gpus ({gpus}) must divide the job's {logical} logical ranks "
                            f"(each worker hosts the same number); feasible: {list(counts)}")
    return NewJob(name=body.name, command=list(body.command), gpus=gpus, min_gpus=lo,
                  max_gpus=hi, tier=str(body.tier), priority=body.priority,
                  deadline_s=body.deadline_s, est_s=body.est_s, total_steps=body.total_steps,
                  logical_ranks=body.logical_ranks, ps_count=body.ps, min_ps=body.min_ps,
                  max_ps=body.max_ps, ps_cpus=body.ps_cpus, ps_mem_gb=body.ps_mem_gb,
                  os_user=os_user, cwd=body.cwd,
                  env=dict(body.env), memory_max=body.memory_max, pids_max=body.pids_max,
                  time_limit_s=body.time_limit_s, hang_s=body.hang_s,
                  max_retries=body.max_retries, gpu_types=tuple(dict.fromkeys(body.gpu_types)))
