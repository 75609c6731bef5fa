"""The config file (TOML) that ``stint serve --config`` and ``stint sim --config`` read.

Every table is optional; ``stint serve --print-config`` prints the effective settings in this
form (and that output is a valid ``--config`` file):

```toml
[server]
host = "127.0.0.1"
port = 8765
log_level = "info"            # debug, info, warning, error

[store]
data_dir = "/home/me/.stint"  # default: $STINT_DATA_DIR, else ~/.stint
db = "postgresql://127.0.0.1/stint"  # default: SQLite in data_dir
jobs_dir = "/srv/stint-jobs"  # default: <data_dir>-jobs

[executor]
kind = "local"                # or "ray" (with ray_address; default $RAY_ADDRESS)
nodes = 2
gpus_per_node = 2
network = "auto"              # local jobs' network: "private" (a namespace per attempt: its
                              # loopback only), "host", or "auto" (private when run as root)
# cluster = "cluster.toml"    # local: typed virtual nodes from a cluster file (instead of nodes)
# ports = "29500-29600"       # local: the jobs' rendezvous ports (MASTER_PORT; default: any free
                              # port below the kernel's ephemeral range)

[controller]
tick_s = 0.5                  # seconds between reconcile steps
grace_s = 30.0                # checkpoint request -> SIGTERM
max_retries = 3
slow_step_s = 1.0             # a slower step is logged as a warning
stuck_step_s = 60.0           # a step running longer: /v1/health/controller answers 503
drain = false
hang_s = 600.0                # a job whose step (or heartbeat) stalls this long restarts; 0: off
retry_backoff_s = 10.0        # a failed attempt's first wait before its retry (doubles each time)
retry_backoff_max_s = 600.0   # ... up to this

[policy]
name = "tiresias"
[policy.options]              # the same keys as --policy-opt
thresholds_gpu_s = [60.0, 600.0]

[tiers]                       # SLA attainment targets (a number in (0, 1], or "best-effort")
premium = 0.95
standard = 0.70
basic = "best-effort"

[limits]                      # every user's, unless a [limits.users.NAME] table says otherwise
max_jobs = 10000              # unfinished jobs
max_gpus = 16                 # max_gpus summed over unfinished jobs (default: no limit)
max_command_bytes = 262144
tiers = ["standard", "basic"] # the tiers a user may submit to
job_memory_max = "16G"        # per worker: the most a job may ask (--memory), and its bound if
                              # it asks none (bytes, or "512M", "16G"; default "none": no bound)
job_pids_max = 4096           # per worker: processes and threads (the most, and the default)
log_max_bytes = "1G"          # per job: past it the log's oldest part is dropped ("none": no cap)
job_disk_max = "none"         # per job: bytes its directory may hold (past them the attempt fails)
max_time_limit_s = 86400      # the longest --time-limit, and the limit of a job that gives none

[limits.users.alice]          # keys it does not set come from [limits]
tiers = ["premium", "standard", "basic"]
```

Flags given on the command line win over the file (``serve`` applies only the flags actually
given). Errors name the file, the line and the key. ``stint sim --config`` reads ``[policy]`` and
``[tiers]`` and ignores the live-only tables.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stint.model.job import Tier
from stint.model.sla import SlaTargets
from stint.policies import registry
from stint.ports import PortRange, PortRangeError, parse_ports

# What the OS must accept when it starts a worker (Linux: ARG_MAX covers argv and environment
# together, at least 2 MiB; the supervisor's own arguments and the contract variables need room).
MAX_COMMAND_BYTES = 256 * 1024
LOG_LEVELS = ("debug", "info", "warning", "error")
EXECUTORS = ("local", "ray")
NETWORKS = ("auto", "host", "private")
BEST_EFFORT = "best-effort"
NONE = "none"  # a bound that is not set, where the config spells it out
MIN_MEMORY = 1 << 20  # the least memory bound a worker may have (1M): below it nothing starts
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*(?:([KMGT])(?:i?B)?|B)?\s*$", re.IGNORECASE)
MAX_SIZE = 1 << 62  # the largest size the store keeps (a 64-bit column)


def parse_size(text: str) -> int:
    """Bytes from ``"16G"``, ``"512M"``, ``"64K"``, ``"1T"`` (powers of 1024; ``"GiB"``/``"GB"``
    read the same) or plain digits; ``ValueError`` naming the text otherwise."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f'{text!r} is not a size (bytes, or a number with K, M, G or T, as '
                         f'"512M" or "16G")')
    size = int(m.group(1)) * _UNITS[(m.group(2) or "").upper()]
    if size > MAX_SIZE:
        raise ValueError(f"{text!r} is more than {format_size(MAX_SIZE)}")
    return size


def format_size(size: int) -> str:
    """``size`` bytes in the largest unit that divides it exactly ("16G", "1536M", "100")."""
    for unit in ("T", "G", "M", "K"):
        if size and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return str(size)


class ConfigError(ValueError):
    """A config file that cannot be read or holds a key or value it should not; ``key`` is the
    dotted key at fault ("" when it is the file as a whole)."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    name: str | None = None
    options: tuple[str, ...] = ()  # KEY=VALUE, as --policy-opt takes them


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    log_level: str = "info"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    data_dir: Path | None = None  # None: $STINT_DATA_DIR, else ~/.stint (the CLI resolves it)
    db: str | None = None  # None: SQLite in data_dir
    jobs_dir: Path | None = None  # None: <data_dir>-jobs

    def jobs_root(self) -> Path:
        if self.jobs_dir is not None:
            return self.jobs_dir
        if self.data_dir is None:
            raise ValueError("store.data_dir is not resolved")
        return self.data_dir.with_name(self.data_dir.name + "-jobs")


@dataclass(frozen=True, slots=True)
class ExecutorConfig:
    kind: str = "local"
    nodes: int = 2  # local: virtual nodes
    gpus_per_node: int = 2  # local: slots per node
    ray_address: str | None = None  # ray: the cluster (None: $RAY_ADDRESS)
    network: str = "auto"  # local: "private", "host", or "auto" (private when run as root)
    cluster: Path | None = None  # local: a cluster file of typed virtual nodes (``--cluster``)
    ports: str | None = None  # local: the jobs' rendezvous ports, "FIRST-LAST" or "PORT" (None: any)

    def port_range(self) -> PortRange | None:
        """``ports`` parsed (PortRangeError if malformed; ``validate`` reports it first)."""
        return parse_ports(self.ports) if self.ports is not None else None

    def network_for(self, root: bool) -> str:
        """The local executor's network: "auto" is "private" for a control plane run as root
        (jobs of several accounts), else "host"."""
        if self.network == "auto":
            return "private" if root else "host"
        return self.network


@dataclass(frozen=True, slots=True)
class ControlConfig:
    tick_s: float = 0.5  # period of the reconcile loop
    grace_s: float = 30.0  # checkpoint request -> SIGTERM
    max_retries: int = 3  # worker failures a job survives
    slow_step_s: float = 1.0  # a step slower than this is logged as a warning
    stuck_step_s: float = 60.0  # a step running longer makes the controller's health a 503
    drain: bool = False  # on SIGTERM/SIGINT, checkpoint and stop every job before exiting
    hang_s: float = 600.0  # a job's default hang timeout (0: no hang detection)
    retry_backoff_s: float = 10.0  # wait before a failed attempt's first retry; doubles each time
    retry_backoff_max_s: float = 600.0  # the longest wait before a retry


@dataclass(frozen=True, slots=True)
class FleetServeConfig:
    """``[fleet]``: several clusters under one control plane (docs/fleet.md, "Live")."""

    file: Path | None = None  # the fleet TOML (None: one cluster, ``[executor]``)
    global_policy: str = "gain"  # the global scheduler (``stint.policies.fleet``)
    global_options: tuple[str, ...] = ()  # its KEY=VALUE parameters


@dataclass(frozen=True, slots=True)
class UserLimits:
    """What one user may have at once: unfinished jobs, GPUs over their unfinished jobs (each
    counted at its ``max_gpus``), bytes of one command, and the tiers they may submit to; and
    what bounds each of their jobs: a worker's memory and processes (the most a job may ask,
    and the bound of one that asks none), its log and directory, and the longest time limit
    (also the limit of a job that gives none). None: no bound."""

    max_jobs: int = 10_000
    max_gpus: int | None = None  # None: the cluster's size is the only bound
    max_command_bytes: int = MAX_COMMAND_BYTES
    tiers: tuple[Tier, ...] = tuple(Tier)
    job_memory_max: int | None = None  # bytes per worker
    job_pids_max: int = 4096  # processes and threads per worker
    log_max_bytes: int | None = 1 << 30  # per job
    job_disk_max: int | None = None  # bytes of the job's directory
    max_time_limit_s: float | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Every user's limits (``default``) and the users whose limits differ."""

    default: UserLimits = field(default_factory=UserLimits)
    users: Mapping[str, UserLimits] = field(default_factory=dict)

    def of(self, user: str) -> UserLimits:
        return self.users.get(user, self.default)

    def key_of(self, user: str) -> str:
        """The config key that sets ``user``'s limits (named by a refusal)."""
        return f"limits.users.{user}" if user in self.users else "limits"


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything ``stint serve`` is configured with (file, then the flags given)."""

    server: ServerConfig = field(default_factory=ServerConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    controller: ControlConfig = field(default_factory=ControlConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    tiers: SlaTargets = field(default_factory=SlaTargets)
    limits: Limits = field(default_factory=Limits)
    fleet: FleetServeConfig = field(default_factory=FleetServeConfig)

    def policy_name(self) -> str:
        return self.policy.name or "fifo"

    def policy_options(self) -> tuple[str, ...]:
        """The policy's options with the tier targets for a policy that takes them."""
        return registry.tier_options((self.policy_name(),), self.tiers) + self.policy.options


_TABLES: dict[str, set[str]] = {
    "server": {"host", "port", "log_level"},
    "store": {"data_dir", "db", "jobs_dir"},
    "executor": {"kind", "nodes", "gpus_per_node", "ray_address", "network", "cluster", "ports"},
    "controller": {"tick_s", "grace_s", "max_retries", "slow_step_s", "stuck_step_s", "drain",
                   "hang_s", "retry_backoff_s", "retry_backoff_max_s"},
    "policy": {"name", "options"},
    "tiers": {t.value for t in Tier},
    "limits": {"max_jobs", "max_gpus", "max_command_bytes", "tiers", "users", "job_memory_max",
               "job_pids_max", "log_max_bytes", "job_disk_max", "max_time_limit_s"},
    "fleet": {"file", "global_policy", "global_options"},
}
_TIER_KEYS = tuple(t.value for t in Tier)


def load(path: Path) -> ServeConfig:
    """The whole file; unknown keys and values of the wrong type or range are errors naming the
    file, the line and the key."""
    doc = _Doc.read(path)
    top = _Table(doc, (), doc.data, set(_TABLES))
    server = top.sub("server")
    store = top.sub("store")
    ex = top.sub("executor")
    ctl = top.sub("controller")
    d = ServeConfig()  # the defaults
    limits = top.sub("limits")
    default = _user_limits(limits, d.limits.default)
    users = limits.sub("users")
    cfg = ServeConfig(
        server=ServerConfig(server.text("host", d.server.host),
                            server.integer("port", d.server.port),
                            server.text("log_level", d.server.log_level)),
        store=StoreConfig(store.path("data_dir"), store.opt_text("db"), store.path("jobs_dir")),
        executor=ExecutorConfig(ex.text("kind", d.executor.kind),
                                ex.integer("nodes", d.executor.nodes),
                                ex.integer("gpus_per_node", d.executor.gpus_per_node),
                                ex.opt_text("ray_address"),
                                ex.text("network", d.executor.network),
                                ex.path("cluster"),
                                ex.opt_text("ports")),
        controller=ControlConfig(ctl.number("tick_s", d.controller.tick_s),
                                 ctl.number("grace_s", d.controller.grace_s),
                                 ctl.integer("max_retries", d.controller.max_retries),
                                 ctl.number("slow_step_s", d.controller.slow_step_s),
                                 ctl.number("stuck_step_s", d.controller.stuck_step_s),
                                 ctl.flag("drain", d.controller.drain),
                                 ctl.number("hang_s", d.controller.hang_s),
                                 ctl.number("retry_backoff_s", d.controller.retry_backoff_s),
                                 ctl.number("retry_backoff_max_s",
                                            d.controller.retry_backoff_max_s)),
        policy=_policy(top.sub("policy")),
        tiers=_tiers(top.sub("tiers")),
        limits=Limits(default, {name: _user_limits(users.sub(name, _TABLES["limits"] - {"users"}),
                                                   default) for name in users.data}),
        fleet=_fleet(top.sub("fleet")),
    )
    problem = validate(cfg)
    if problem is not None:
        raise doc.error(*problem)
    return cfg


def validate(cfg: ServeConfig) -> tuple[str, str] | None:
    """The first setting out of range, as (dotted key, what is wrong); None if all are fine."""
    s, e, c = cfg.server, cfg.executor, cfg.controller
    checks: list[tuple[str, bool, str]] = [
        ("server.port", 0 <= s.port <= 65535, f"must be in 0..65535, not {s.port}"),
        ("server.log_level", s.log_level in LOG_LEVELS,
         f"must be one of {', '.join(LOG_LEVELS)}, not {s.log_level!r}"),
        ("executor.kind", e.kind in EXECUTORS,
         f"must be one of {', '.join(EXECUTORS)}, not {e.kind!r}"),
        ("executor.nodes", e.nodes >= 1, f"must be at least 1, not {e.nodes}"),
        ("executor.gpus_per_node", e.gpus_per_node >= 1, f"must be at least 1, not {e.gpus_per_node}"),
        ("executor.network", e.network in NETWORKS,
         f"must be one of {', '.join(NETWORKS)}, not {e.network!r}"),
        ("executor.ports", _port_problem(e.ports) is None, _port_problem(e.ports) or ""),
        ("controller.tick_s", _finite_at_least(c.tick_s, 0.01), f"must be at least 0.01, not {c.tick_s}"),
        ("controller.grace_s", _finite_at_least(c.grace_s, 0.0), f"must be at least 0, not {c.grace_s}"),
        ("controller.max_retries", c.max_retries >= 0, f"must be at least 0, not {c.max_retries}"),
        ("controller.slow_step_s", _finite_at_least(c.slow_step_s, 0.0) and c.slow_step_s > 0,
         f"must be above 0, not {c.slow_step_s}"),
        ("controller.stuck_step_s", _finite_at_least(c.stuck_step_s, 0.0) and c.stuck_step_s > 0,
         f"must be above 0, not {c.stuck_step_s}"),
        ("controller.hang_s", _finite_at_least(c.hang_s, 0.0),
         f"must be at least 0, not {c.hang_s}"),
        ("controller.retry_backoff_s", _finite_at_least(c.retry_backoff_s, 0.0),
         f"must be at least 0, not {c.retry_backoff_s}"),
        ("controller.retry_backoff_max_s",
         _finite_at_least(c.retry_backoff_max_s, max(0.0, c.retry_backoff_s)),
         f"must be at least controller.retry_backoff_s, not {c.retry_backoff_max_s}"),
    ]
    for key, lim in (("limits", cfg.limits.default),
                     *((f"limits.users.{u}", v) for u, v in cfg.limits.users.items())):
        checks += [
            (f"{key}.max_jobs", lim.max_jobs >= 1, f"must be at least 1, not {lim.max_jobs}"),
            (f"{key}.max_gpus", lim.max_gpus is None or lim.max_gpus >= 1,
             f"must be at least 1, not {lim.max_gpus}"),
            (f"{key}.max_command_bytes", 1 <= lim.max_command_bytes <= MAX_COMMAND_BYTES,
             f"must be in 1..{MAX_COMMAND_BYTES}, not {lim.max_command_bytes}"),
            (f"{key}.tiers", bool(lim.tiers), "must name at least one tier"),
            (f"{key}.job_memory_max",
             lim.job_memory_max is None or lim.job_memory_max >= MIN_MEMORY,
             f"must be at least {format_size(MIN_MEMORY)}, not {lim.job_memory_max}"),
            (f"{key}.job_pids_max", lim.job_pids_max >= 1,
             f"must be at least 1, not {lim.job_pids_max}"),
            (f"{key}.log_max_bytes", lim.log_max_bytes is None or lim.log_max_bytes >= 1,
             f"must be at least 1, not {lim.log_max_bytes}"),
            (f"{key}.job_disk_max", lim.job_disk_max is None or lim.job_disk_max >= 1,
             f"must be at least 1, not {lim.job_disk_max}"),
            (f"{key}.max_time_limit_s", lim.max_time_limit_s is None
             or _finite_at_least(lim.max_time_limit_s, 0.0) and lim.max_time_limit_s > 0,
             f"must be above 0, not {lim.max_time_limit_s}"),
        ]
    return next(((k, msg) for k, ok, msg in checks if not ok), None)


def _port_problem(ports: str | None) -> str | None:
    """What is wrong with an ``[executor] ports`` value (None: nothing, or not set)."""
    if ports is None:
        return None
    try:
        parse_ports(ports)
    except PortRangeError as e:
        return str(e)
    return None


def dump(cfg: ServeConfig) -> str:
    """``cfg`` as TOML that ``load`` reads back to ``cfg`` (settings left to their defaults that
    have no TOML value, such as no database URL, are comments)."""
    st, ex, ctl, lim = cfg.store, cfg.executor, cfg.controller, cfg.limits
    out = ["[server]", *_kv(host=cfg.server.host, port=cfg.server.port,
                            log_level=cfg.server.log_level),
           "", "[store]", *_kv(data_dir=st.data_dir, db=st.db,
                               jobs_dir=st.jobs_root() if st.data_dir else st.jobs_dir),
           "", "[executor]", *_kv(kind=ex.kind, nodes=ex.nodes, gpus_per_node=ex.gpus_per_node,
                                  ray_address=ex.ray_address, network=ex.network,
                                  cluster=ex.cluster, ports=ex.ports),
           "", "[controller]", *_kv(tick_s=ctl.tick_s, grace_s=ctl.grace_s,
                                    max_retries=ctl.max_retries, slow_step_s=ctl.slow_step_s,
                                    stuck_step_s=ctl.stuck_step_s, drain=ctl.drain,
                                    hang_s=ctl.hang_s, retry_backoff_s=ctl.retry_backoff_s,
                                    retry_backoff_max_s=ctl.retry_backoff_max_s),
           "", "[policy]", *_kv(name=cfg.policy_name()), "", "[policy.options]"]
    for opt in cfg.policy.options:
        key, _, value = opt.partition("=")
        out.append(f"{_key(key.strip())} = {_option_value(value.strip())}")
    out += ["", "[tiers]"]
    out += [f"{t.value} = {_toml(cfg.tiers.of(t) or BEST_EFFORT)}" for t in Tier]
    out += ["", "[limits]", *_limits_kv(lim.default)]
    for user, ul in lim.users.items():
        out += ["", f"[limits.users.{_key(user)}]", *_limits_kv(ul)]
    fl = cfg.fleet
    out += ["", "[fleet]", *_kv(file=fl.file, global_policy=fl.global_policy,
                                global_options=list(fl.global_options))]
    return "\n".join(out) + "\n"


# -- reading -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Doc:
    path: Path
    text: str
    data: dict[str, object]

    @staticmethod
    def read(path: Path) -> _Doc:
        try:
            text = path.read_text(encoding="utf-8")
            return _Doc(path, text, tomllib.loads(text))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None

    def error(self, key: str, msg: str, named: bool = False) -> ConfigError:
        """``file:line: key: msg`` (``named``: the message names the key itself)."""
        line = line_of(self.text, _split_key(key))
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        return ConfigError(f"{where}: {msg}" if named else f"{where}: {key}: {msg}", key)


@dataclass(frozen=True, slots=True)
class _Table:
    doc: _Doc
    prefix: tuple[str, ...]
    data: dict[str, object]
    allowed: set[str] | None  # None: any key (a table of names)

    def __post_init__(self) -> None:
        for key in self.data:
            if self.allowed is not None and key not in self.allowed:
                valid = ", ".join(self._key(k) for k in sorted(self.allowed))
                raise self.doc.error(self._key(key), f"unknown key {self._key(key)}; valid: "
                                     f"{valid}", named=True)

    def _key(self, key: str) -> str:
        return ".".join((*self.prefix, key))

    def sub(self, key: str, allowed: set[str] | None = None) -> _Table:
        """The table ``key`` (empty if absent); its keys are ``allowed``, else those
        ``_TABLES`` lists for it, else any (a table of names)."""
        value = self.data.get(key, {})
        if not isinstance(value, dict):
            raise self.doc.error(self._key(key), f"must be a table ([{self._key(key)}])")
        return _Table(self.doc, (*self.prefix, key), value,
                      allowed if allowed is not None else _TABLES.get(self._key(key)))

    def raw(self, key: str, kinds: tuple[type, ...], what: str) -> object | None:
        value = self.data.get(key)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)
                                  and bool not in kinds):
            raise self.doc.error(self._key(key), f"must be {what} (got {value!r})")
        return value

    def text(self, key: str, default: str) -> str:
        value = self.raw(key, (str,), "a string")
        return value if isinstance(value, str) else default

    def opt_text(self, key: str) -> str | None:
        value = self.raw(key, (str,), "a string")
        return value if isinstance(value, str) else None

    def path(self, key: str) -> Path | None:
        value = self.opt_text(key)
        return None if value is None else Path(value).expanduser()

    def integer(self, key: str, default: int) -> int:
        value = self.raw(key, (int,), "an integer")
        return value if isinstance(value, int) else default

    def opt_integer(self, key: str, default: int | None) -> int | None:
        value = self.raw(key, (int,), "an integer")
        return value if isinstance(value, int) else default

    def number(self, key: str, default: float) -> float:
        value = self.raw(key, (int, float), "a number")
        return float(value) if isinstance(value, int | float) else default

    def size(self, key: str, default: int | None) -> int | None:
        """Bytes: an integer, a size such as "512M" or "16G", or "none" (no bound)."""
        value = self.raw(key, (int, str), 'bytes (an integer, "512M", "16G") or "none"')
        if value is None:
            return default
        if isinstance(value, int):
            return value
        if value == NONE:
            return None
        try:
            return parse_size(str(value))
        except ValueError as exc:
            raise self.doc.error(self._key(key), str(exc)) from None

    def opt_number(self, key: str, default: float | None) -> float | None:
        """A number, or "none" (no bound)."""
        value = self.raw(key, (int, float, str), 'a number or "none"')
        if value is None:
            return default
        if isinstance(value, str):
            if value != NONE:
                raise self.doc.error(self._key(key), f'must be a number or "none" (got {value!r})')
            return None
        return float(value) if isinstance(value, int | float) else default

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw(key, (bool,), "true or false")
        return value if isinstance(value, bool) else default


def _policy(t: _Table) -> PolicyConfig:
    opts = t.sub("options", None)
    for key in opts.data:
        if key in _TIER_KEYS:
            raise t.doc.error(f"policy.options.{key}", f"tier targets belong in [tiers] "
                              f"({key} = ...), which every policy that takes them reads")
    name = t.opt_text("name")
    if name is not None:
        _check_option_keys(t, name, list(opts.data))
    return PolicyConfig(name, tuple(f"{k}={_text(t.doc, k, v)}" for k, v in opts.data.items()))


def _fleet(t: _Table) -> FleetServeConfig:
    opts = t.raw("global_options", (list,), "a list of KEY=VALUE strings") or []
    if not isinstance(opts, list) or not all(isinstance(o, str) and "=" in o for o in opts):
        raise t.doc.error("fleet.global_options",
                          f"must be a list of KEY=VALUE strings (got {opts!r})")
    return FleetServeConfig(t.path("file"), t.text("global_policy", "gain"),
                            tuple(str(o) for o in opts))


def _check_option_keys(t: _Table, name: str, keys: list[str]) -> None:
    """The policy is registered and takes each option key (the values' types are checked when
    the policy is built, with the key named)."""
    from stint.policies.registry import UnknownPolicyError, options_of

    try:
        valid = options_of(name)
    except UnknownPolicyError as exc:
        raise t.doc.error("policy.name", str(exc).strip("'\"")) from None
    for key in keys:
        target, dot, rest = key.replace("-", "_").partition(".")
        if (rest if dot else target) not in valid and (not dot or target == name):
            listed = ", ".join(f"{k} ({v})" for k, v in valid.items()) or "none"
            raise t.doc.error(f"policy.options.{key}", f"policy {name!r} has no option "
                              f"{rest if dot else target!r}; valid: {listed}")


def _tiers(t: _Table) -> SlaTargets:
    base = SlaTargets()
    values: dict[str, float | None] = {}
    for tier in Tier:
        raw = t.data.get(tier.value, base.of(tier))
        if raw == BEST_EFFORT or raw is None:
            values[tier.value] = None
        elif isinstance(raw, int | float) and not isinstance(raw, bool) and 0 < raw <= 1:
            values[tier.value] = float(raw)
        else:
            raise t.doc.error(f"tiers.{tier.value}", f"must be a target in (0, 1] or "
                              f"{BEST_EFFORT!r} (got {raw!r})")
    return SlaTargets(values["premium"], values["standard"], values["basic"])


def _user_limits(t: _Table, base: UserLimits) -> UserLimits:
    tiers = t.raw("tiers", (list,), "a list of tiers")
    if isinstance(tiers, list):
        bad = [x for x in tiers if x not in _TIER_KEYS]
        if bad:
            raise t.doc.error(t._key("tiers"), f"{bad[0]!r} is not a tier; tiers: "
                              f"{', '.join(_TIER_KEYS)}")
    return UserLimits(t.integer("max_jobs", base.max_jobs), t.opt_integer("max_gpus", base.max_gpus),
                      t.integer("max_command_bytes", base.max_command_bytes),
                      tuple(Tier(x) for x in _TIER_KEYS if x in tiers) if isinstance(tiers, list)
                      else base.tiers,
                      job_memory_max=t.size("job_memory_max", base.job_memory_max),
                      job_pids_max=t.integer("job_pids_max", base.job_pids_max),
                      log_max_bytes=t.size("log_max_bytes", base.log_max_bytes),
                      job_disk_max=t.size("job_disk_max", base.job_disk_max),
                      max_time_limit_s=t.opt_number("max_time_limit_s", base.max_time_limit_s))


def _text(doc: _Doc, key: str, value: object) -> str:
    """A TOML value as ``--policy-opt`` text (the policy's factory checks the type)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                       for v in value):
        return ",".join(str(v) for v in value)
    raise doc.error(f"policy.options.{key}", f"{value!r} is not a number, string, boolean or "
                    "list of numbers")


def _finite_at_least(value: float, low: float) -> bool:
    return math.isfinite(value) and value >= low


# -- lines ---------------------------------------------------------------------------------
def line_of(text: str, key: tuple[str, ...]) -> int | None:
    """The line that sets ``key`` (a dotted path), or failing that the line of its longest
    prefix that the file sets (its table's header); None if no part of it is in the file.
    A simple reading of TOML: table headers and ``key = value`` lines."""
    best: tuple[int, int] | None = None  # (length of the prefix matched, line)
    table: tuple[str, ...] = ()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("["):
            table = _split_key(line.lstrip("[").split("]", 1)[0])
            here = table
        elif "=" in line and not line.startswith("#"):
            here = (*table, *_split_key(line.split("=", 1)[0]))
        else:
            continue
        n = len(here)
        if here == key[:n] and (best is None or n > best[0]):
            best = (n, number)
    return None if best is None else best[1]


def _split_key(text: str) -> tuple[str, ...]:
    """``a."b.c".d`` -> ("a", "b.c", "d")."""
    parts: list[str] = []
    part, quote = "", ""
    for ch in text.strip():
        if quote:
            quote, part = ("", part) if ch == quote else (quote, part + ch)
        elif ch in "\"'":
            quote = ch
        elif ch == ".":
            parts, part = [*parts, part.strip()], ""
        else:
            part += ch
    return (*parts, part.strip())


# -- writing -------------------------------------------------------------------------------
def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    text = str(value)
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}"
                         for c in text) + '"'


_UNSET = {"file": "one cluster, [executor]", "cluster": "nodes x gpus_per_node, untyped",
          "db": "SQLite in data_dir", "ray_address": "$RAY_ADDRESS",
          "ports": "any free port",
          "max_gpus": "no limit but the cluster's size"}


def _kv(**values: object) -> list[str]:
    return [f"{k} = {_toml(v)}" if v is not None else f"# {k}: not set ({_UNSET.get(k, 'default')})"
            for k, v in values.items()]


def _limits_kv(lim: UserLimits) -> list[str]:
    bounds = _kv(job_memory_max=_size_value(lim.job_memory_max), job_pids_max=lim.job_pids_max,
                 log_max_bytes=_size_value(lim.log_max_bytes),
                 job_disk_max=_size_value(lim.job_disk_max),
                 max_time_limit_s=NONE if lim.max_time_limit_s is None else lim.max_time_limit_s)
    return _kv(max_jobs=lim.max_jobs, max_gpus=lim.max_gpus,
               max_command_bytes=lim.max_command_bytes, tiers=[t.value for t in lim.tiers]) + bounds


def _size_value(size: int | None) -> str | int:
    """A size as the config writes it: "none", "16G" where that is exact, else bytes."""
    if size is None:
        return NONE
    text = format_size(size)
    return text if not text.isdigit() else size


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml(key)


def _option_value(text: str) -> str:
    """An option's text as the TOML value it came from, where that is plain."""
    if re.fullmatch(r"-?\d+", text):
        return text
    if text in ("true", "false"):
        return text
    try:
        float(text)
    except ValueError:
        parts = text.split(",")
        if len(parts) > 1 and all(re.fullmatch(r"-?\d+(\.\d*)?([eE][-+]?\d+)?", p.strip())
                                  for p in parts):
            return "[" + ", ".join(p.strip() for p in parts) + "]"
        return _toml(text)
    return text if math.isfinite(float(text)) else _toml(text)
