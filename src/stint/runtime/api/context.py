"""What every route shares: the settings, the caller (its bearer token), and one ``ApiContext``
(the store, the settings and the node cache, kept on ``app.state.api``) with the job lookups."""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from stint.config import Limits
from stint.runtime.intake import Intake
from stint.runtime.reads import progress_out
from stint.runtime.schemas import MAX_ID, JobOut, ProgressOut
from stint.runtime.states import TERMINAL
from stint.runtime.store import Caller, Store
from stint.runtime.tables import Job


@dataclass(frozen=True, slots=True)
class ApiSettings:
    jobs_dir: Path  # where the controller puts each job's log (``<id>/log.txt``)
    clock: Callable[[], float] = time.time  # the API is the edge: it owns a clock
    # Multi-user mode (the control plane runs as root): every job runs as its owner's OS
    # account. Otherwise (single-user mode) every job runs as ``own_account``.
    multi_user: bool = False
    own_account: str = field(default_factory=getpass.getuser)
    admin_token_file: Path | None = None  # rewritten whenever the admin user's token changes
    limits: Limits = field(default_factory=Limits)  # per user (``[limits]`` of the config)
    policy: str = ""  # the controller's policy, for people (``/v1/cluster``)
    # A fleet (``serve --fleet``): each cluster's storage directory, where its jobs' logs are
    # (empty: a single cluster, logs under ``jobs_dir``)
    clusters: Mapping[str, Path] = field(default_factory=dict)


class NodeCache:
    """The cluster's nodes, read once: ``serve`` records them before the API starts."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._gpus: dict[str, int] | None = None
        self._names: dict[str, list[str]] = {}  # by cluster ("" for a single cluster)
        self._cluster_gpus: dict[str, int] = {}
        self._type_gpus: dict[str, int] | None = None
        self._hosts: list[tuple[str, float, float]] | None = None

    def hosts(self) -> list[tuple[str, float, float]]:
        """Each node's role, CPU cores and memory (GiB)."""
        if self._hosts is None:
            self._hosts = [(n.role, n.cpus, n.mem_gb) for n in self._store.nodes()]
        return self._hosts

    def gpus(self) -> dict[str, int]:
        if not self._gpus:
            rows = self._store.nodes()
            self._gpus = {n.name: n.gpus for n in rows}
            self._names, self._cluster_gpus = {}, {}
            for n in rows:  # (ordered by cluster, then position)
                self._names.setdefault(n.cluster, []).append(n.name)
                self._cluster_gpus[n.cluster] = self._cluster_gpus.get(n.cluster, 0) + n.gpus
        return self._gpus

    def type_gpus(self) -> dict[str, int]:
        """Each accelerator type's GPUs over the nodes ("" for untyped nodes)."""
        if self._type_gpus is None:
            self._type_gpus = {}
            for n in self._store.nodes():
                self._type_gpus[n.gpu_type] = self._type_gpus.get(n.gpu_type, 0) + n.gpus
        return self._type_gpus

    def names(self, cluster: str | None = None) -> list[str]:
        """The node names of ``cluster`` by position (Allocations refer to positions)."""
        self.gpus()
        return self._names.get(cluster or "", [])

    def cluster_gpus(self, cluster: str) -> int:
        self.gpus()
        return self._cluster_gpus.get(cluster, 0)


@dataclass(frozen=True, slots=True)
class ApiContext:
    """The store, the settings, the node cache and the submissions' group commit every handler
    reaches (``Ctx``)."""

    store: Store
    settings: ApiSettings
    nodes: NodeCache
    intake: Intake

    def own_job(self, job_id: int, who: Caller) -> Job:
        """The job, if the caller sees it (their own; any for an admin), else 404."""
        job = self.store.get_job(job_id, who)
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        return job

    def live_job(self, job_id: int, who: Caller) -> Job:
        """``own_job``, and 409 if it has already ended."""
        job = self.own_job(job_id, who)
        if job.state in TERMINAL:
            raise HTTPException(409, f"job {job_id} is already {job.state}")
        return job

    def out(self, job: Job, who: Caller) -> JobOut:
        user = who.name if job.user_id == who.user_id else self.store.user_names().get(job.user_id, "?")
        return JobOut.of(job, user, self.nodes.names(job.cluster), progress=progress_of(self.settings, job))


def job_dir(settings: ApiSettings, job: Job) -> Path:
    """Where a job's log and status are: its cluster's storage in a fleet, else ``jobs_dir``."""
    return settings.clusters.get(job.cluster or "", settings.jobs_dir) / str(job.id)


def progress_of(settings: ApiSettings, job: Job) -> ProgressOut | None:
    """The SDK's last report of a job that has run (its ``status.json``), if any."""
    if job.first_start_at is None:
        return None
    got = progress_out(job_dir(settings, job) / "status.json", job.total_steps)
    return got if got.reported_at is not None else None


async def _context(request: Request) -> ApiContext:
    """The app's ``ApiContext``. Async, like ``_caller``: no hop to the thread pool."""
    api: ApiContext = request.app.state.api
    return api


Ctx = Annotated[ApiContext, Depends(_context)]
_bearer = HTTPBearer(auto_error=False)


async def _caller(api: Ctx, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Caller:
    """The authenticated caller, or 401. Async so that a remembered token costs no hop to the
    thread pool; only a lookup in the database goes there."""
    who = None
    if cred:
        who = api.store.cached_caller(cred.credentials) or await run_in_threadpool(
            api.store.caller_for_token, cred.credentials)
    if who is None:
        raise HTTPException(401, "missing or invalid API token", headers={"WWW-Authenticate": "Bearer"})
    return who


Who = Annotated[Caller, Depends(_caller)]
JobId = Annotated[int, PathParam(ge=1, le=MAX_ID)]
# The start of a window in wall seconds (default: an hour ago).
Since = Annotated[float | None, Query(ge=0.0, le=1e12, allow_inf_nan=False)]
HISTORY_S = 3600.0


def must_be_admin(who: Caller, what: str) -> None:
    if not who.is_admin:
        raise HTTPException(403, f"only an admin may {what}")
