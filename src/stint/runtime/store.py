"""The durable store: engine set-up (SQLite in WAL mode or PostgreSQL), migrations, and the queries
the API and the controller share. The store is the source of truth of the control plane."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from stint.model.allocation import Allocation
from stint.runtime.states import SUBMITTED, TERMINAL, JobState, check_transition
from stint.runtime.tables import (
    Decision,
    Job,
    NodeRow,
    Override,
    StoreMeta,
    Token,
    Transition,
    User,
)
from stint.runtime.usage import Check, UsageBook

ADMIN_NAME = "admin"
TOKEN_TTL_S = 5.0  # how long a token lookup is remembered (see Store.caller_for_token)

# An array's first task, built once (its id becomes the array's).
_INSERT_JOB = insert(Job).returning(Job.id)
# Every column NULL: the base of the ``Job`` an insert returns (``_job_values`` sets the rest):
# reading an attribute never set costs many times reading a set one.
_NULL_JOB: dict[str, Any] = {c.key: None for c in Job.__table__.columns}


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` (and ``postgres://``) for psycopg 3; pass everything else on."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'stint.db'}"


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event decide when transactions start (see below).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # Writers take the write lock up front: a deferred transaction that later writes can fail
        # with SQLITE_BUSY without waiting when the API and the controller write at once. Readers
        # (Store.read) take no lock at all in WAL mode.
        read_only = conn.get_execution_options().get("stint_read_only")
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision (idempotent)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config(str(Path(__file__).with_name("alembic.ini")))
    cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class LastAdminError(ValueError):
    """Demoting the only admin would leave no one able to administer the store."""


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    is_admin: bool
    os_user: str | None
    created_at: float
    token_created_at: float | None  # None: the token was revoked


class StoreLocked(RuntimeError):
    """Another control plane holds the store (``holder`` says which: pid and host)."""

    def __init__(self, holder: str) -> None:
        super().__init__(f"the store is held by {holder}")
        self.holder = holder


def write_token_file(path: Path, token: str) -> None:
    """Write ``token`` to ``path`` (mode 0600) atomically: readers see the old or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def dump_alloc(alloc: Allocation) -> str:
    """``[[node, workers], ...]``; with parameter servers ``{"workers": [...], "ps": [[node,
    servers], ...]}``."""
    workers = [list(p) for p in alloc.workers]
    if not alloc.ps:
        return json.dumps(workers)
    return json.dumps({"workers": workers, "ps": [list(p) for p in alloc.ps]})


def load_alloc(text: str | None) -> Allocation:
    if not text:
        return Allocation()
    raw = json.loads(text)
    if isinstance(raw, dict):
        return Allocation(tuple((int(n), int(c)) for n, c in raw["workers"]),
                          tuple((int(n), int(c)) for n, c in raw["ps"]))
    return Allocation(tuple((int(n), int(c)) for n, c in raw))


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling the API."""

    user_id: int
    name: str
    is_admin: bool
    os_user: str | None = None  # the OS account the user's jobs run as


@dataclass(frozen=True, slots=True)
class NewJob:
    """A validated submission (the API checks it against the cluster first)."""

    name: str
    command: list[str]
    gpus: int
    min_gpus: int
    max_gpus: int
    tier: str
    priority: float
    deadline_s: float | None
    est_s: float | None = None
    total_steps: int | None = None
    logical_ranks: int | None = None
    ps_count: int | None = None  # parameter servers of a stint.torch.ps job (at ``gpus``)
    min_ps: int | None = None  # its PS counts' bounds (None: ps_count)
    max_ps: int | None = None
    ps_cpus: float | None = None  # one PS's CPU cores and memory (GiB; None: the defaults)
    ps_mem_gb: float | None = None
    os_user: str | None = None  # the OS account it runs as (None: the control plane's)
    cwd: str | None = None  # its working directory (None: the account's home)
    env: dict[str, str] = field(default_factory=dict)  # added to the worker's environment
    # Bounds it asks for (None: the operator's defaults; ``Job`` says what each is)
    memory_max: int | None = None
    pids_max: int | None = None
    time_limit_s: float | None = None
    hang_s: float | None = None
    max_retries: int | None = None
    gpu_types: tuple[str, ...] = ()  # the accelerator types it may run on (empty: any)


class Store:
    """Sessions and queries. Thread-safe: each call opens its own session."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.engine = make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._reader = self.engine.execution_options(stint_read_only=True)
        self._readers = sessionmaker(self._reader, expire_on_commit=False)
        self._callers: dict[str, tuple[Caller, float]] = {}  # token hash -> (caller, expiry)
        self._callers_lock = threading.Lock()
        self._callers_gen = 0  # bumped by forget_tokens: a lookup racing a change is not kept
        self._lock_conn: Connection | None = None  # held by ``lock`` (PostgreSQL)
        self._lock_fd: int | None = None  # held by ``lock`` (SQLite)
        self.usage = UsageBook(self.live_usage)  # per-user usage between submissions

    def migrate(self) -> None:
        migrate(self.engine)

    def epoch(self, now: float) -> float:
        """The store's time origin (wall seconds), written once on first use: the live controller
        measures policy time from it, so a slot policy's time starts near 0, as in simulation."""
        with self.session() as s:
            row = s.get(StoreMeta, "epoch")
            if row is None:
                row = StoreMeta(key="epoch", value=repr(float(now)))
                s.add(row)
            return float(row.value)
    def integrity_problem(self) -> str | None:
        """SQLite: the first problem ``PRAGMA quick_check`` finds in the file, else None (a
        PostgreSQL server checks its own pages)."""
        if not self.url.startswith("sqlite"):
            return None
        from sqlalchemy import text

        with self.engine.connect() as conn:
            first = conn.execute(text("PRAGMA quick_check")).scalar()
        return None if first == "ok" else str(first)

    def close(self) -> None:
        if self._lock_conn is not None:
            self._lock_conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self._lock_conn = self._lock_fd = None
        self.engine.dispose()

    def lock(self, holder: str) -> None:
        """Claim the store for this process until ``close`` (or its death), or raise
        StoreLocked naming the holder. SQLite: an ``flock`` on ``<file>.lock`` (which records
        ``holder``); PostgreSQL: a session advisory lock keyed by the store's id, on a
        connection of its own whose ``application_name`` carries ``holder``."""
        if self.url.startswith("sqlite"):
            self._lock_file(self.engine.url.database or "", holder)
        else:
            self._lock_pg(holder)

    def _lock_file(self, db_path: str, holder: str) -> None:
        import fcntl

        fd = os.open(f"{db_path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = os.pread(fd, 256, 0).decode(errors="replace").strip() or "unknown process"
            os.close(fd)
            raise StoreLocked(held) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"stint serve {holder}\n".encode(), 0)
        self._lock_fd = fd

    def _lock_pg(self, holder: str) -> None:
        from sqlalchemy import text

        key = int.from_bytes(hashlib.sha256(self.store_id().encode()).digest()[:8], "big",
                             signed=True)
        conn = self.engine.connect()
        conn.execute(text("SELECT set_config('application_name', :n, false)"),
                     {"n": f"stint serve {holder}"[:63]})
        if conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar():
            conn.commit()
            self._lock_conn = conn
            return
        row = conn.execute(text(
            "SELECT a.application_name, a.client_addr FROM pg_locks l JOIN pg_stat_activity a "
            "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.classid = :hi AND l.objid = :lo"),
            {"hi": (key >> 32) & 0xFFFFFFFF, "lo": key & 0xFFFFFFFF}).first()
        conn.close()
        raise StoreLocked(f"{row[0]} (from {row[1] or 'a local socket'})" if row
                          else "another session")

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on error."""
        with self._sessions() as s, s.begin():
            yield s

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only snapshot (never takes SQLite's write lock); rolled back at the end."""
        with self._readers() as s:  # begins on first use; close() rolls back
            yield s

    # -- users and tokens ------------------------------------------------------------------
    def create_token(self, user: str, now: float, admin: bool | None = False,
                     os_user: str | None = None) -> str:
        """Create ``user`` if new and give it a fresh token (replacing any earlier one).
        ``admin`` True or False sets its role (None keeps it; a new user is then no admin);
        demoting the last admin raises LastAdminError. ``os_user``, if given, becomes the OS
        account its jobs run as. Concurrent calls for one user are serialised by the database:
        the loser of a race retries."""
        for tries in range(3):
            try:
                return self._create_token(user, now, admin, os_user)
            except IntegrityError:
                if tries == 2:
                    raise
        raise AssertionError("unreachable")

    def _create_token(self, user: str, now: float, admin: bool | None,
                      os_user: str | None) -> str:
        token = secrets.token_urlsafe(32)
        with self.session() as s:
            row = s.scalar(select(User).where(User.name == user).with_for_update())
            if row is None:
                row = User(name=user, is_admin=bool(admin), created_at=now, os_user=os_user)
                s.add(row)
                s.flush()
            else:
                if admin is False and row.is_admin and self._admins(s) <= 1:
                    raise LastAdminError(f"{user} is the only admin; make another user admin "
                                         "first")
                if admin is not None:
                    row.is_admin = admin
                if os_user is not None:
                    row.os_user = os_user
            s.execute(delete(Token).where(Token.user_id == row.id))
            s.add(Token(user_id=row.id, token_hash=hash_token(token), created_at=now))
        self.forget_tokens()  # the replaced token must stop working at once
        return token

    @staticmethod
    def _admins(s: Session) -> int:
        q = select(func.count()).select_from(User).where(User.is_admin.is_(True))
        return int(s.scalar(q) or 0)

    def revoke_token(self, user: str) -> bool:
        """Delete ``user``'s token (it stops working at once); False if there is no such user."""
        with self.session() as s:
            uid = s.scalar(select(User.id).where(User.name == user))
            if uid is None:
                return False
            s.execute(delete(Token).where(Token.user_id == uid))
        self.forget_tokens()
        return True

    def users(self) -> list[UserInfo]:
        """Every user with its role, OS account and when its current token was made (or None)."""
        q = (select(User.name, User.is_admin, User.os_user, User.created_at, Token.created_at)
             .outerjoin(Token, Token.user_id == User.id).order_by(User.id))
        with self.read() as s:
            return [UserInfo(n, a, o, c, t) for n, a, o, c, t in s.execute(q)]

    def forget_tokens(self) -> None:
        """Drop the remembered token lookups (done whenever a token is created or replaced)."""
        with self._callers_lock:
            self._callers.clear()
            self._callers_gen += 1

    def cached_caller(self, token: str) -> Caller | None:
        """The remembered owner of ``token`` (no database access), or None if not remembered."""
        hit = self._callers.get(hash_token(token))
        return hit[0] if hit is not None and hit[1] > time.monotonic() else None

    def ensure_admin_token(self, path: Path, now: float, os_user: str | None = None) -> str | None:
        """On an empty store, create the admin user (its jobs run as ``os_user``) and write its
        token to ``path`` (mode 0600)."""
        with self.session() as s:
            if s.scalar(select(func.count()).select_from(User)):
                return None
        token = self.create_token(ADMIN_NAME, now, admin=True, os_user=os_user)
        write_token_file(path, token)
        return token

    def caller_for_token(self, token: str) -> Caller | None:
        """The token's owner, or None. Every API request calls this, so a valid token's lookup is
        remembered for ``TOKEN_TTL_S`` seconds; ``create_token`` forgets them all, so a token
        replaced through this store (the API, hence ``stint token create``) fails at once, and one
        replaced by any other writer of the database within ``TOKEN_TTL_S``. Unknown tokens are
        never remembered (a new token works at once)."""
        hit = self.cached_caller(token)
        if hit is not None:
            return hit
        key, gen = hash_token(token), self._callers_gen
        q = (select(User.id, User.name, User.is_admin, User.os_user)
             .join(Token, Token.user_id == User.id)
             .where(Token.token_hash == key))
        with self._reader.connect() as conn:  # Core, no ORM session
            row = conn.execute(q).first()
        if row is None:
            return None
        who = Caller(row.id, row.name, row.is_admin, row.os_user)
        with self._callers_lock:
            if gen == self._callers_gen:
                self._callers[key] = (who, time.monotonic() + TOKEN_TTL_S)
        return who

    def store_id(self) -> str:
        """The store's identity (a random hex id written by the migration that created it)."""
        with self.read() as s:
            value = s.scalar(select(StoreMeta.value).where(StoreMeta.key == "store_id"))
        if not value:
            raise RuntimeError("the store has no store_id (store_meta); was it migrated?")
        return value

    # -- nodes -----------------------------------------------------------------------------
    def set_nodes(self, nodes: Sequence[tuple[str, int]], cluster: str = "",
                  region: str = "", types: Sequence[str] = (),
                  hosts: Sequence[tuple[str, float, float]] = ()) -> None:
        """Record a cluster's nodes (name, GPUs) in order, with their accelerator ``types``
        (none: untyped) and ``hosts``: each one's role, CPU cores and memory (none: "any",
        0, 0); forget its nodes no longer present. In a fleet each cluster records its own,
        named ``CLUSTER/NODE``."""
        prefix = f"{cluster}/" if cluster else ""
        with self.session() as s:
            known = {n.name: n for n in s.scalars(select(NodeRow).where(NodeRow.cluster == cluster))}
            for i, (name, gpus) in enumerate(nodes):
                row = known.pop(prefix + name, None)
                kind = types[i] if i < len(types) else ""
                role, cpus, mem = hosts[i] if i < len(hosts) else ("any", 0.0, 0.0)
                if row is None:
                    s.add(NodeRow(name=prefix + name, position=i, gpus=gpus, state="ready",
                                  cluster=cluster, region=region, gpu_type=kind, role=role,
                                  cpus=cpus, mem_gb=mem))
                else:
                    row.position, row.gpus, row.state, row.region = i, gpus, "ready", region
                    row.gpu_type, row.role, row.cpus, row.mem_gb = kind, role, cpus, mem
            for row in known.values():
                s.delete(row)

    def keep_clusters(self, clusters: Sequence[str]) -> None:
        """Forget the nodes of every cluster not named (a single cluster is ``""``)."""
        with self.session() as s:
            for row in s.scalars(select(NodeRow).where(NodeRow.cluster.not_in(list(clusters)))):
                s.delete(row)

    def set_node_states(self, cluster: str, down: Sequence[str]) -> None:
        """Mark a cluster's nodes named in ``down`` (its own names) down, the others ready."""
        prefix = f"{cluster}/" if cluster else ""
        with self.session() as s:
            for row in s.scalars(select(NodeRow).where(NodeRow.cluster == cluster)):
                row.state = "down" if row.name.removeprefix(prefix) in down else "ready"

    def nodes(self) -> list[NodeRow]:
        with self.read() as s:
            return list(s.scalars(select(NodeRow).order_by(NodeRow.cluster, NodeRow.position)))

    # -- jobs ------------------------------------------------------------------------------
    def add_job(self, spec: NewJob, caller: Caller, now: float, check: Check | None = None) -> Job:
        """Insert a queued job and its first transition. ``check``, if given, is called with the
        caller's usage (unfinished jobs, their ``max_gpus``) first and refuses the job by
        raising; the job's place is reserved until it is committed (``UsageBook``). The API
        submits through ``runtime.intake`` instead: many jobs a transaction."""
        if check is not None:
            self.usage.reserve(caller.user_id, 1, spec.max_gpus, check)
        try:
            (job,) = self.insert_jobs([(spec, caller, now)])
        except BaseException:
            if check is not None:
                self.usage.release(caller.user_id, 1, spec.max_gpus)
            raise
        if check is not None:
            self.usage.done(caller.user_id, 1, spec.max_gpus)
        return job

    def insert_jobs(self, jobs: Sequence[tuple[NewJob, Caller, float]]) -> list[Job]:
        """Insert queued jobs (spec, owner, submission time) and their first transitions in one
        transaction (one commit, one WAL flush), in order; the jobs as stored. No limits are
        checked here (``add_job``, ``runtime.intake``)."""
        if not jobs:
            return []
        rows = [_job_values(spec, caller, now) for spec, caller, now in jobs]
        with self.engine.begin() as conn:
            for row, job_id in zip(rows, _new_job_ids(conn, len(rows)), strict=True):
                row["id"] = job_id
            _insert_many(conn, "jobs", rows)
            _insert_many(conn, "transitions", [
                {"job_id": row["id"], "src": "", "dst": str(JobState.QUEUED), "at": now,
                 "attempt": 0, "reason": f"submitted by {caller.name}"}
                for row, (_spec, caller, now) in zip(rows, jobs, strict=True)])
        return [Job(**{**_NULL_JOB, **row}) for row in rows]

    def add_array(self, spec: NewJob, caller: Caller, now: float, indices: range,
                  parallel: int | None = None, check: Check | None = None) -> list[int]:
        """Insert a job array in one transaction: a queued task of ``spec`` per index, ``{i}``
        in its command replaced by the index; the array's id is its first task's job id. Returns
        the tasks' job ids in index order. ``check`` as for ``add_job``, for every task at once."""
        n, gpus = len(indices), len(indices) * spec.max_gpus
        base = _job_values(spec, caller, now)
        base.update(array_parallel=parallel)
        rows = []
        for i in indices:
            command = [arg.replace("{i}", str(i)) for arg in spec.command]
            rows.append({**base, "command": json.dumps(command), "array_index": i})
        if check is not None:
            self.usage.reserve(caller.user_id, n, gpus, check)
        try:
            with self.engine.begin() as conn:
                first = conn.execute(_INSERT_JOB, rows[0]).scalar_one()
                conn.execute(update(Job).where(Job.id == first).values(array_id=first))
                for row in rows:
                    row["array_id"] = first
                _insert_many(conn, "jobs", rows[1:])
                ids = list(conn.scalars(select(Job.id).where(Job.array_id == first)
                                        .order_by(Job.array_index)))
                reason = f"submitted by {caller.name} (array {first})"
                _insert_many(conn, "transitions", [
                    {"job_id": job_id, "src": "", "dst": str(JobState.QUEUED), "at": now,
                     "attempt": 0, "reason": reason} for job_id in ids])
        except BaseException:
            if check is not None:
                self.usage.release(caller.user_id, n, gpus)
            raise
        if check is not None:
            self.usage.done(caller.user_id, n, gpus)
        return ids

    def array_tasks(self, array_id: int, caller: Caller) -> list[Job]:
        """The tasks of an array ``caller`` may see, in index order (none: no such array)."""
        q = select(Job).where(Job.array_id == array_id).order_by(Job.array_index)
        if not caller.is_admin:
            q = q.where(Job.user_id == caller.user_id)
        with self.read() as s:
            return list(s.scalars(q))

    def cancel_array(self, array_id: int, caller: Caller, now: float) -> list[int]:
        """Ask the controller to cancel every unfinished task of an array (one transaction);
        the tasks asked."""
        done = [str(t) for t in TERMINAL]
        which = [Job.array_id == array_id, Job.state.not_in(done)]
        if not caller.is_admin:
            which.append(Job.user_id == caller.user_id)
        with self.session() as s:
            ids = list(s.scalars(select(Job.id).where(*which)))
            if ids:
                s.execute(update(Job).where(Job.id.in_(ids)).values(cancel_requested=True))
                s.execute(insert(Override), [
                    {"job_id": i, "kind": "cancel", "value": "array", "user_id": caller.user_id,
                     "at": now} for i in ids])
        return ids

    def runs_as(self, job_id: int) -> tuple[str, bool, str | None] | None:
        """The job's owner (name, admin now) and the OS account it was submitted to run as;
        None if there is no such job."""
        q = (select(User.name, User.is_admin, Job.os_user)
             .join(User, User.id == Job.user_id).where(Job.id == job_id))
        with self.read() as s:
            row = s.execute(q).first()
        return None if row is None else (row[0], bool(row[1]), row[2])

    def get_job(self, job_id: int, caller: Caller | None = None) -> Job | None:
        """The job, or None if it does not exist or ``caller`` may not see it."""
        with self.read() as s:
            job = s.get(Job, job_id)
        if job is None or (caller and not caller.is_admin and job.user_id != caller.user_id):
            return None
        return job

    def list_jobs(
        self, caller: Caller, states: Sequence[str] = (), limit: int = 1000, offset: int = 0,
        user_id: int | None = None, where: JobFilter | None = None,
    ) -> list[Job]:
        """The jobs ``caller`` may see (an admin: all; ``user_id``: that user's only), those
        ``where`` admits, in ``where.order``."""
        f = where or JobFilter()
        q = _filtered(select(Job), caller, states, user_id, f)
        with self.read() as s:
            return list(s.scalars(q.order_by(*_ORDERS[f.order]).limit(limit).offset(offset)))

    def count_listed(self, caller: Caller, states: Sequence[str] = (), user_id: int | None = None,
                     where: JobFilter | None = None) -> int:
        """How many jobs ``list_jobs`` would page through with the same filters."""
        q = _filtered(select(func.count()).select_from(Job), caller, states, user_id,
                      where or JobFilter())
        with self.read() as s:
            return int(s.scalar(q) or 0)

    def user_names(self) -> dict[int, str]:
        with self.read() as s:
            return {uid: name for uid, name in s.execute(select(User.id, User.name))}

    def decisions(self, job_id: int) -> list[Decision]:
        """The plan's actions the controller enacted for the job, in order."""
        with self.read() as s:
            q = select(Decision).where(Decision.job_id == job_id).order_by(Decision.id)
            return list(s.scalars(q))

    def transitions(self, job_id: int) -> list[Transition]:
        with self.read() as s:
            q = select(Transition).where(Transition.job_id == job_id).order_by(Transition.id)
            return list(s.scalars(q))

    def history(self, since: float, job_id: int | None = None
                ) -> tuple[list[Job], list[Transition]]:
        """The jobs not finished before ``since`` (or just ``job_id``), in id order, and all
        their transitions in the order they were written (``runtime.history`` reads them)."""
        which = (Job.id == job_id) if job_id is not None else _since(since)
        with self.read() as s:
            rows = list(s.scalars(select(Job).where(which).order_by(Job.id)))
            ids = select(Job.id).where(which)
            q = select(Transition).where(Transition.job_id.in_(ids)).order_by(Transition.id)
            return rows, list(s.scalars(q))

    def jobs_since(self, since: float) -> list[Job]:
        """The jobs not finished before ``since``, in id order."""
        with self.read() as s:
            return list(s.scalars(select(Job).where(_since(since)).order_by(Job.id)))

    def request(self, job_id: int, caller: Caller, kind: str, value: str, now: float,
                **columns: Any) -> None:
        """Record an operator request (``cancel``, ``preempt``, ``resize``, ``migrate``) and set
        the job's request columns; the controller acts on them at its next step."""
        with self.session() as s:
            s.execute(update(Job).where(Job.id == job_id).values(**columns))
            s.add(Override(job_id=job_id, kind=kind, value=value, user_id=caller.user_id, at=now))

    def live_usage(self, user_id: int) -> tuple[int, int]:
        """(unfinished jobs, the sum of their ``max_gpus``) of a user, for the per-user limits."""
        done = [str(t) for t in TERMINAL]
        q = (select(func.count(), func.coalesce(func.sum(Job.max_gpus), 0))
             .where(Job.user_id == user_id, Job.state.not_in(done)))
        with self.read() as s:
            count, gpus = s.execute(q).one()
        return int(count), int(gpus)

    def max_job_id(self) -> int:
        """The largest job id given out (0 if none)."""
        with self.read() as s:
            return int(s.scalar(select(func.max(Job.id))) or 0)

    def count_jobs(self) -> int:
        with self.read() as s:
            return int(s.scalar(select(func.count()).select_from(Job)) or 0)


_MAX_PARAMS = 16_000  # bound parameters in one statement (SQLite allows 32,766; PostgreSQL 65,535)


def _insert_many(conn: Connection, table: str, rows: list[dict[str, Any]]) -> None:
    """Rows of the same keys in multi-row ``INSERT ... VALUES (...), (...)`` statements of at
    most ``_MAX_PARAMS`` parameters: building each row's parameters through SQLAlchemy costs more
    than the insert itself at thousands of rows (a job array), and a driver's ``executemany``
    pays a statement per row. PostgreSQL: ``COPY`` instead."""
    if not rows:
        return
    keys = list(rows[0])
    if conn.dialect.name == "postgresql":
        _copy_rows(conn, table, keys, rows)
        return
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    one = f"({', '.join([mark] * len(keys))})"
    head = f"INSERT INTO {table} ({', '.join(keys)}) VALUES "
    per = max(1, _MAX_PARAMS // len(keys))
    for start in range(0, len(rows), per):
        chunk = rows[start:start + per]
        params = tuple(r[k] for r in chunk for k in keys)
        conn.exec_driver_sql(head + ", ".join([one] * len(chunk)), params)


def _copy_rows(conn: Connection, table: str, keys: list[str], rows: list[dict[str, Any]]) -> None:
    """PostgreSQL: the rows in one ``COPY ... FROM STDIN`` (the driver parses a long multi-row
    statement in Python, which costs more than the server's insert)."""
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY {table} ({', '.join(keys)}) FROM STDIN") as copy:
        for r in rows:
            copy.write_row(tuple(r[k] for k in keys))


def _new_job_ids(conn: Connection, n: int) -> list[int]:
    """``n`` fresh job ids inside a writing transaction: PostgreSQL's from the column's
    sequence; SQLite's the next after the largest (what it would pick itself: the transaction
    holds the write lock, and job rows are never deleted)."""
    if conn.dialect.name == "postgresql":
        q = "SELECT nextval(pg_get_serial_sequence('jobs', 'id')) FROM generate_series(1, %s)"
        return sorted(int(r[0]) for r in conn.exec_driver_sql(q, (n,)))
    top = int(conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM jobs").scalar_one())
    return list(range(top + 1, top + 1 + n))


def _job_values(spec: NewJob, caller: Caller, now: float) -> dict[str, Any]:
    """The columns of a job just submitted (queued, never run)."""
    return {
        "user_id": caller.user_id, "name": spec.name, "command": json.dumps(spec.command),
        "gpus": spec.gpus, "min_gpus": spec.min_gpus, "max_gpus": spec.max_gpus, "tier": spec.tier,
        "priority": spec.priority, "deadline_s": spec.deadline_s, "submitted_at": now,
        "est_s": spec.est_s, "total_steps": spec.total_steps, "logical_ranks": spec.logical_ranks,
        "ps_count": spec.ps_count, "min_ps": spec.min_ps, "max_ps": spec.max_ps,
        "ps_cpus": spec.ps_cpus, "ps_mem_gb": spec.ps_mem_gb, "work_done": 0.0,
        "state": str(JobState.QUEUED), "reason": SUBMITTED, "attempt": 0, "allocation": "[]",
        "slots": "{}", "failures": 0, "preemptions": 0, "last_change_at": now, "attained_gpu_s": 0.0,
        "cancel_requested": False, "preempt_requested": False, "os_user": spec.os_user,
        "cwd": spec.cwd, "env": json.dumps(spec.env), "memory_max": spec.memory_max,
        "pids_max": spec.pids_max, "time_limit_s": spec.time_limit_s, "hang_s": spec.hang_s,
        "max_retries": spec.max_retries, "run_s": 0.0, "refusals": 0,
        "gpu_types": ",".join(spec.gpu_types),
    }


def _since(t: float) -> ColumnElement[bool]:
    return or_(Job.finished_at.is_(None), Job.finished_at >= t)


class Writes(Protocol):
    """Where transition rows go: a session, or the controller's step recorder."""

    def add(self, instance: object) -> None: ...


def update_jobs(s: Session, changes: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """Set columns of job rows (job id, column -> value) inside ``s``: one statement executed
    for many rows per set of columns (a statement a row costs more to build than to run, at
    thousands of rows a step)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for job_id, values in changes:
        groups.setdefault(tuple(sorted(values)), []).append(
            {"k_id": job_id, **{f"v_{k}": v for k, v in values.items()}})
    for keys, rows in groups.items():
        s.connection().execute(_update_of(keys), rows)


@functools.cache
def _update_of(keys: tuple[str, ...]) -> Any:
    """The statement setting ``keys`` of the row ``k_id`` (Core, many rows at once: no ORM bulk
    rules), built once per set of columns."""
    return update(Job).where(Job.id == bindparam("k_id")).values({k: bindparam(f"v_{k}") for k in keys})


def record_transition(
    s: Writes, job: Job, dst: JobState, now: float, reason: str, **columns: Any
) -> None:
    """Move ``job`` to ``dst`` inside ``s`` (a session): check the edge, set the columns, log it.

    A transition is never dated before the job's previous one: a step's clock is read before it
    loads the rows, so a job submitted in between would otherwise be admitted "before" it was
    submitted (by a fraction of a tick)."""
    src = JobState(job.state)
    check_transition(str(job.id), src, dst)
    now = max(now, job.last_change_at or now)
    for key, value in columns.items():
        setattr(job, key, value)
    job.state = dst
    job.reason = reason
    job.last_change_at = now
    s.add(Transition(job_id=job.id, src=src, dst=dst, at=now, attempt=job.attempt, reason=reason,
                     allocation=job.allocation if dst == JobState.STARTING else None))


# The orders ``list_jobs`` pages in.
JobOrder = Literal["asc", "desc", "queue"]


@dataclass(frozen=True)
class JobFilter:
    """``GET /v1/jobs``'s narrowing beyond state and user: a tier, one array's tasks, the order
    (``asc``/``desc``: by id; ``queue``: by queue position, jobs without one last, then by id)."""

    tier: str | None = None
    array_id: int | None = None
    order: JobOrder = "asc"


_ORDERS: dict[str, tuple[Any, ...]] = {
    "asc": (Job.id,), "desc": (Job.id.desc(),),
    "queue": (Job.queue_position.is_(None), Job.queue_position, Job.id),
}


def _filtered(q: Any, caller: Caller, states: Sequence[str], user_id: int | None,
              f: JobFilter) -> Any:
    if not caller.is_admin:
        q = q.where(Job.user_id == caller.user_id)
    if user_id is not None:
        q = q.where(Job.user_id == user_id)
    if states:
        q = q.where(Job.state.in_(list(states)))
    if f.tier is not None:
        q = q.where(Job.tier == f.tier)
    if f.array_id is not None:
        q = q.where(Job.array_id == f.array_id)
    return q
