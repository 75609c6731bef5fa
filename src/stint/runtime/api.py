"""The HTTP API (FastAPI). Handlers check input and call the store; the controller does the rest.

Every route but ``/v1/health`` needs ``Authorization: Bearer <token>``; users see and act on their
own jobs only (someone else's job is a 404), the admin on all. Requests on a job are recorded and
carried out by the controller at its next step.
"""

from __future__ import annotations

import getpass
import logging
import os
import pwd
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool

from stint.config import Limits, UserLimits, format_size
from stint.model.job import Tier
from stint.runtime.accounts import refusal
from stint.runtime.intake import Intake
from stint.runtime.reads import cluster_out, history_out, progress_out
from stint.runtime.schemas import (
    MAX_ID,
    USER_NAME,
    ArrayCancelOut,
    ArrayIn,
    ArrayOut,
    ClusterOut,
    DryRunOut,
    HistoryOut,
    JobDetail,
    JobIn,
    JobOut,
    LogsOut,
    MigrateIn,
    NodeOut,
    ProgressOut,
    ResizeIn,
    TokenIn,
    TokenOut,
    TransitionOut,
    UserOut,
    WhoAmI,
    type_refusal,
)
from stint.runtime.states import HOLDING, TERMINAL, JobState
from stint.runtime.store import (
    ADMIN_NAME,
    Caller,
    JobFilter,
    LastAdminError,
    NewJob,
    Store,
    UserInfo,
    load_alloc,
    write_token_file,
)
from stint.runtime.tables import Job
from stint.runtime.view import worker_counts

log = logging.getLogger(__name__)
LOG_CHUNK = 256 * 1024
MAX_BODY_BYTES = 4 * 1024 * 1024  # larger bodies: 413 before authentication; a smaller one
# that is still too big for the OS (a command over MAX_COMMAND_BYTES) is a 422 naming its field
MAX_LOG_OFFSET = 2**53  # an offset beyond any log; also exact in every JSON reader


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


def unprocessable(field: str, msg: str, where: str = "body") -> RequestValidationError:
    """A 422 in FastAPI's own format, naming the field."""
    return RequestValidationError([{"loc": (where, field), "msg": msg, "type": "value_error"}])


_bearer = HTTPBearer(auto_error=False)


async def _caller(
    request: Request, cred: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    """The authenticated caller, or 401. Async so that a remembered token costs no hop to the
    thread pool; only a lookup in the database goes there."""
    store: Store = request.app.state.store
    who = None
    if cred:
        who = store.cached_caller(cred.credentials) or await run_in_threadpool(
            store.caller_for_token, cred.credentials)
    if who is None:
        raise HTTPException(401, "missing or invalid API token", headers={"WWW-Authenticate": "Bearer"})
    return who


Who = Annotated[Caller, Depends(_caller)]
JobId = Annotated[int, PathParam(ge=1, le=MAX_ID)]
# The start of a window in wall seconds (default: an hour ago).
Since = Annotated[float | None, Query(ge=0.0, le=1e12, allow_inf_nan=False)]
HISTORY_S = 3600.0


def create_app(store: Store, settings: ApiSettings) -> FastAPI:
    # The body limit is middleware: a larger body is a 413 before any route or token is read.
    app = FastAPI(title="stint control plane", version="1", max_body_size=MAX_BODY_BYTES)
    app.state.store = store
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(OperationalError, _store_unavailable)
    app.add_exception_handler(OSError, _store_unavailable)
    nodes = _NodeCache(store)
    intake = Intake(store)

    def own_job(job_id: int, who: Caller) -> Job:
        job = store.get_job(job_id, who)
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        return job

    def live_job(job_id: int, who: Caller) -> Job:
        job = own_job(job_id, who)
        if job.state in TERMINAL:
            raise HTTPException(409, f"job {job_id} is already {job.state}")
        return job

    def out(job: Job, who: Caller) -> JobOut:
        user = who.name if job.user_id == who.user_id else store.user_names().get(job.user_id, "?")
        return JobOut.of(job, user, nodes.names(job.cluster), progress=_progress(settings, job))

    @app.get("/v1/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/jobs", status_code=201, response_model=JobOut)
    async def submit(body: JobIn, who: Who) -> Response:
        """On the event loop (no thread-pool hop); answered once committed, in a transaction
        shared with the submissions that arrived meanwhile (``runtime.intake``)."""
        spec = _check_job(body, nodes.gpus(), _run_as(who, settings), nodes.type_gpus())
        limits, key = settings.limits.of(who.name), settings.limits.key_of(who.name)
        job = await intake.add_job(spec, who, settings.clock(),
                                   check=lambda usage: _check_limits(spec, usage, limits, key))
        return Response(out(job, who).model_dump_json(), 201, media_type="application/json")

    @app.post("/v1/jobs/dry-run")
    def dry_run(body: JobIn, who: Who) -> DryRunOut:
        """Whether the job would fit and when, from a forecast with it added; not stored."""
        from stint.runtime.whatif import infeasible, out_of, what_if

        spec = _check_job(body, nodes.gpus(), _run_as(who, settings), nodes.type_gpus())
        limits, key = settings.limits.of(who.name), settings.limits.key_of(who.name)
        try:
            _check_limits(spec, store.live_usage(who.user_id), limits, key)
        except HTTPException as exc:
            return out_of(infeasible(f"over your limits: {exc.detail}", settings.policy))
        except RequestValidationError as exc:
            return out_of(infeasible(f"over your limits: {exc.errors()[0]['msg']}",
                                     settings.policy))
        return out_of(what_if(store, spec, who, settings.clock(), settings.policy))

    @app.post("/v1/arrays", status_code=201)
    def submit_array(body: ArrayIn, who: Who) -> ArrayOut:
        spec = _check_job(body, nodes.gpus(), _run_as(who, settings), nodes.type_gpus())
        limits, key = settings.limits.of(who.name), settings.limits.key_of(who.name)
        indices = body.indices()
        ids = store.add_array(spec, who, settings.clock(), indices, body.array_parallel,
                              check=lambda usage: _check_array_limits(spec, len(indices), usage,
                                                                      limits, key))
        return ArrayOut(array_id=ids[0], tasks=len(ids), job_ids=ids, first_index=indices[0])

    @app.get("/v1/arrays/{array_id}")
    def list_array(array_id: JobId, who: Who) -> list[JobOut]:
        tasks = store.array_tasks(array_id, who)
        if not tasks:
            raise HTTPException(404, f"no job array {array_id}")
        users = store.user_names()
        return [JobOut.of(j, users.get(j.user_id, "?"), nodes.names(j.cluster)) for j in tasks]

    @app.post("/v1/arrays/{array_id}/cancel", status_code=202)
    def cancel_array(array_id: JobId, who: Who) -> ArrayCancelOut:
        if not store.array_tasks(array_id, who):
            raise HTTPException(404, f"no job array {array_id}")
        return ArrayCancelOut(array_id=array_id,
                              cancelling=store.cancel_array(array_id, who, settings.clock()))

    @app.get("/v1/jobs")
    def list_jobs(
        who: Who,
        response: Response,
        state: Annotated[list[JobState] | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
        offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
        user: Annotated[str | None, Query(pattern=USER_NAME)] = None,
        tier: Tier | None = None,
        array: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        order: Literal["asc", "desc"] = "asc",
    ) -> list[JobOut]:
        """A page of the jobs the caller sees; ``X-Total-Count``: how many match in all."""
        users = store.user_names()
        only = _only_user(who, user, users)
        states = [str(s) for s in state or []]
        where = JobFilter(tier=tier.value if tier else None, array_id=array,
                          newest_first=order == "desc")
        jobs = store.list_jobs(who, states, limit, offset, only, where)
        response.headers["X-Total-Count"] = str(store.count_listed(who, states, only, where))
        return [JobOut.of(j, users.get(j.user_id, "?"), nodes.names(j.cluster),
                          progress=_progress(settings, j)) for j in jobs]

    @app.get("/v1/jobs/{job_id}")
    def show(job_id: JobId, who: Who) -> JobDetail:
        job = own_job(job_id, who)
        trans = [TransitionOut.of(t) for t in store.transitions(job_id)]
        return JobDetail(**out(job, who).model_dump(), transitions=trans)

    @app.get("/v1/jobs/{job_id}/logs")
    def logs(job_id: JobId, who: Who,
             offset: Annotated[int, Query(ge=0, le=MAX_LOG_OFFSET)] = 0,
             tail: Annotated[int | None, Query(ge=0, le=LOG_CHUNK)] = None) -> LogsOut:
        """The log from ``offset``; ``tail``: its last ``tail`` bytes instead."""
        job = own_job(job_id, who)
        path = _job_dir(settings, job) / "log.txt"
        if tail is not None:
            offset = max(0, _log_size(path) - tail)
        text, nxt = _read_log(path, offset)
        return LogsOut(text=text, next_offset=nxt, finished=job.state in TERMINAL)

    @app.get("/v1/jobs/{job_id}/progress")
    def progress(job_id: JobId, who: Who) -> ProgressOut:
        job = own_job(job_id, who)
        return progress_out(_job_dir(settings, job) / "status.json", job.total_steps)

    @app.get("/v1/history")
    def history(who: Who, since: Since = None,
                job: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None) -> HistoryOut:
        """The timeline of allocations (preemptions, resizes, migrations marked), GPUs held
        and jobs waiting over time, from ``since``; ``job``: that job's alone."""
        now = settings.clock()
        if job is not None:
            own_job(job, who)
        return history_out(store, who, now - HISTORY_S if since is None else since, now, job)

    @app.get("/v1/cluster")
    def cluster(who: Who, since: Since = None) -> ClusterOut:
        """The policy, GPUs, SLA attainment per tier of the jobs since ``since``."""
        now = settings.clock()
        return cluster_out(store, settings.policy, now - HISTORY_S if since is None else since,
                           now)

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202)
    def cancel(job_id: JobId, who: Who) -> JobOut:
        live_job(job_id, who)
        store.request(job_id, who, "cancel", "", settings.clock(), cancel_requested=True)
        return out(own_job(job_id, who), who)

    @app.post("/v1/jobs/{job_id}/preempt", status_code=202)
    def preempt(job_id: JobId, who: Who) -> JobOut:
        job = live_job(job_id, who)
        if job.state not in (JobState.RUNNING, JobState.STARTING):
            raise HTTPException(409, f"job {job_id} is {job.state}, not running")
        store.request(job_id, who, "preempt", "", settings.clock(), preempt_requested=True)
        return out(own_job(job_id, who), who)

    def pinnable(job_id: int, who: Caller) -> Job:
        if not who.is_admin:
            raise HTTPException(403, "only an admin may pin a job (resize or migrate); the "
                                "policy decides for everyone else")
        return live_job(job_id, who)

    @app.post("/v1/jobs/{job_id}/resize", status_code=202)
    def resize(job_id: JobId, body: ResizeIn, who: Who) -> JobOut:
        job = pinnable(job_id, who)
        counts = worker_counts(job.gpus, job.min_gpus, job.max_gpus, job.logical_ranks)
        if body.workers not in counts:
            raise unprocessable("workers", f"job {job_id} runs on {list(counts)} workers (the "
                                f"divisors of its {job.logical_ranks or job.max_gpus} logical "
                                f"ranks within min_gpus..max_gpus), not {body.workers}")
        if job.pin_node is not None and body.workers > nodes.gpus().get(job.pin_node, 0):
            raise unprocessable("workers", f"job {job_id} is pinned to {job.pin_node}, which "
                                f"has fewer than {body.workers} GPUs")
        store.request(job_id, who, "resize", str(body.workers), settings.clock(),
                      pin_workers=body.workers)
        return out(own_job(job_id, who), who)

    @app.post("/v1/jobs/{job_id}/migrate", status_code=202)
    def migrate(job_id: JobId, body: MigrateIn, who: Who) -> JobOut:
        job = pinnable(job_id, who)
        if body.to_cluster is not None:
            return to_cluster(job, body.to_cluster, who)
        assert body.node is not None
        gpus = nodes.gpus()
        if body.node not in gpus:
            raise unprocessable("node", f"no node {body.node!r}; nodes are {sorted(gpus)}")
        workers = job.pin_workers or load_alloc(job.allocation).num_workers or job.gpus
        if workers > gpus[body.node]:
            raise unprocessable("node", f"node {body.node} has {gpus[body.node]} GPUs; job "
                                f"{job_id} needs {workers}")
        store.request(job_id, who, "migrate", body.node, settings.clock(), pin_node=body.node)
        return out(own_job(job_id, who), who)

    def to_cluster(job: Job, cluster: str, who: Caller) -> JobOut:
        if cluster not in settings.clusters:
            known = sorted(settings.clusters) or "none: not a fleet"
            raise unprocessable("to_cluster", f"no cluster {cluster!r}; clusters are {known}")
        if job.gpus > nodes.cluster_gpus(cluster):
            raise unprocessable("to_cluster", f"cluster {cluster} has "
                                f"{nodes.cluster_gpus(cluster)} GPUs; job {job.id} needs {job.gpus}")
        if job.cluster == cluster and not job.to_cluster:
            raise HTTPException(409, f"job {job.id} is already on cluster {cluster}")
        if job.to_cluster:
            raise HTTPException(409, f"job {job.id} is already moving to cluster {job.to_cluster}")
        store.request(job.id, who, "migrate", f"cluster={cluster}", settings.clock(),
                      to_cluster=cluster)
        return out(own_job(job.id, who), who)

    @app.post("/v1/jobs/{job_id}/unpin", status_code=202)
    def unpin(job_id: JobId, who: Who) -> JobOut:
        pinnable(job_id, who)
        store.request(job_id, who, "unpin", "", settings.clock(), pin_workers=None, pin_node=None)
        return out(own_job(job_id, who), who)

    @app.get("/v1/nodes")
    def list_nodes(who: Who) -> list[NodeOut]:
        return _nodes(store, who)

    @app.post("/v1/tokens", status_code=201)
    def create_token(body: TokenIn, who: Who) -> TokenOut:
        must_be_admin(who, "create tokens")
        if body.os_user is not None:
            _check_account(body.os_user, settings)
        try:
            token = store.create_token(body.user, settings.clock(), admin=body.admin,
                                       os_user=body.os_user)
        except LastAdminError as exc:
            raise unprocessable("admin", str(exc)) from None
        if body.user == ADMIN_NAME and settings.admin_token_file is not None:
            write_token_file(settings.admin_token_file, token)  # the CLI's default stays valid
        row = next(u for u in store.users() if u.name == body.user)
        return TokenOut(user=row.name, admin=row.is_admin, token=token, os_user=row.os_user)

    @app.delete("/v1/tokens/{user}")
    def revoke_token(user: Annotated[str, PathParam(pattern=USER_NAME)], who: Who) -> UserOut:
        must_be_admin(who, "revoke tokens")
        if user == who.name:
            raise HTTPException(409, "an admin cannot revoke their own token (ask another "
                                "admin, or replace it with stint token create)")
        if not store.revoke_token(user):
            raise HTTPException(404, f"no user {user}")
        return next(_user_out(u) for u in store.users() if u.name == user)

    @app.get("/v1/users")
    def list_users(who: Who) -> list[UserOut]:
        must_be_admin(who, "list users")
        return [_user_out(u) for u in store.users()]

    @app.get("/v1/whoami")
    def whoami(who: Who) -> WhoAmI:
        runs_as = who.os_user if settings.multi_user else settings.own_account
        if settings.multi_user and refusal(who.name, who.os_user, who.is_admin) is not None:
            runs_as = None  # (submissions are refused)
        return WhoAmI(user=who.name, admin=who.is_admin, os_user=runs_as)

    from stint.runtime.web import mount

    mount(app)  # the dashboard (/ui): pages that read this API
    return app


class _NodeCache:
    """The cluster's nodes, read once: ``serve`` records them before the API starts."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._gpus: dict[str, int] | None = None
        self._names: dict[str, list[str]] = {}  # by cluster ("" for a single cluster)
        self._cluster_gpus: dict[str, int] = {}
        self._type_gpus: dict[str, int] | None = None

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


def must_be_admin(who: Caller, what: str) -> None:
    if not who.is_admin:
        raise HTTPException(403, f"only an admin may {what}")


def _user_out(u: UserInfo) -> UserOut:
    return UserOut(user=u.name, admin=u.is_admin, os_user=u.os_user, created_at=u.created_at,
                   token_created_at=u.token_created_at)


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


def _check_account(os_user: str, settings: ApiSettings) -> None:
    """A 422 naming ``os_user`` unless jobs can run as that account here."""
    if not settings.multi_user and os_user != settings.own_account:
        raise unprocessable("os_user", f"single-user mode: jobs run as "
                            f"{settings.own_account!r} only (start stint serve as root to run "
                            "jobs as their owners)")
    try:
        pwd.getpwnam(os_user)
    except KeyError:
        raise unprocessable("os_user", f"no OS account {os_user!r} on this host") from None


def _only_user(who: Caller, user: str | None, users: dict[int, str]) -> int | None:
    """The user id ``GET /v1/jobs?user=NAME`` lists (None: every job the caller sees); 403 for
    someone else's unless the caller is an admin, 404 for no such user."""
    if user is None:
        return None
    if user != who.name and not who.is_admin:
        raise HTTPException(403, f"only an admin may list another user's jobs (you are "
                            f"{who.name})")
    ids = [uid for uid, name in users.items() if name == user]
    if not ids:
        raise HTTPException(404, f"no user {user}")
    return ids[0]


def _job_dir(settings: ApiSettings, job: Job) -> Path:
    """Where a job's log and status are: its cluster's storage in a fleet, else ``jobs_dir``."""
    return settings.clusters.get(job.cluster or "", settings.jobs_dir) / str(job.id)


def _progress(settings: ApiSettings, job: Job) -> ProgressOut | None:
    """The SDK's last report of a job that has run (its ``status.json``), if any."""
    if job.first_start_at is None:
        return None
    got = progress_out(_job_dir(settings, job) / "status.json", job.total_steps)
    return got if got.reported_at is not None else None


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


def _check_job(body: JobIn, node_gpus: dict[str, int], os_user: str | None = None,
               type_gpus: dict[str, int] | None = None) -> NewJob:
    """Cross-field and cluster checks of a submission; a 422 names the offending field."""
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
                  logical_ranks=body.logical_ranks, ps_count=body.ps, os_user=os_user, cwd=body.cwd,
                  env=dict(body.env), memory_max=body.memory_max, pids_max=body.pids_max,
                  time_limit_s=body.time_limit_s, hang_s=body.hang_s,
                  max_retries=body.max_retries, gpu_types=tuple(dict.fromkeys(body.gpu_types)))


def _nodes(store: Store, who: Caller) -> list[NodeOut]:
    """Every node's used and free GPUs; the job ids on it are the caller's only (all for an
    admin)."""
    rows = store.nodes()
    used = {(n.cluster, n.position): 0 for n in rows}
    jobs: dict[tuple[str, int], list[int]] = {(n.cluster, n.position): [] for n in rows}
    for job in store.list_jobs(Caller(0, "", True), [str(s) for s in HOLDING], limit=1_000_000):
        for node, count in load_alloc(job.allocation).workers:
            key = (job.cluster or "", node)
            used[key] = used.get(key, 0) + count
            if who.is_admin or job.user_id == who.user_id:
                jobs.setdefault(key, []).append(job.id)
    return [NodeOut(name=n.name, gpus=n.gpus, used=used[(n.cluster, n.position)],
                    free=n.gpus - used[(n.cluster, n.position)], state=n.state,
                    jobs=jobs[(n.cluster, n.position)], cluster=n.cluster, region=n.region,
                    gpu_type=n.gpu_type)
            for n in rows]


def _read_log(path: Path, offset: int) -> tuple[str, int]:
    """Up to ``LOG_CHUNK`` bytes from ``offset``, ending on a whole UTF-8 character (from the
    start if the log is now shorter than ``offset``: it was cut to its cap). The file is in a
    directory its job owns: links are not followed, only a plain file is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "", offset
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and offset > st.st_size:
            offset = 0  # the log passed its cap and lost its oldest part: read it anew
        if not stat.S_ISREG(st.st_mode) or offset >= st.st_size:
            return "", offset  # (a seek beyond the file system's largest file is EINVAL)
        f.seek(offset)
        data = f.read(LOG_CHUNK)
    if len(data) == LOG_CHUNK:
        data = data[:len(data) - _partial_tail(data)]
    return data.decode("utf-8", errors="replace"), offset + len(data)


def _log_size(path: Path) -> int:
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _partial_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` start a UTF-8 character that is cut off."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): is its character complete?
            need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else \
                4 if byte >> 3 == 0b11110 else 1
            return back if need > back else 0
    return 0


async def _store_unavailable(_request: Request, exc: Exception) -> JSONResponse:
    """The store or the disk cannot serve the request (unreachable database, full disk): a 503
    with the reason, which the client may retry, never a bare 500."""
    why = str(getattr(exc, "orig", None) or exc).splitlines()[0][:300]
    log.error("store unavailable: %s: %s", type(exc).__name__, why)
    return JSONResponse({"detail": f"the control plane cannot use its store now: {why}"},
                        status_code=503, headers={"Retry-After": "5"})


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 without the offending input, which may not be JSON (NaN, 1e400, bytes)."""
    assert isinstance(exc, RequestValidationError)
    detail = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")),
               "type": str(e.get("type", ""))} for e in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)

