"""Trace readers: the Philly job log and Pollux workloads, shipped or by path.

``load("philly")``, ``load("pollux:6")`` or ``load(path)`` return a ``Trace``: job specs sorted by
arrival (seconds from the first kept job) and the performance model their work is measured in.
A malformed row raises ``TraceError`` naming the file, the line and the reason: a missing, extra,
non-numeric, negative, NaN or infinite field, an oversized field, an unterminated quote, bad
UTF-8, a truncated or non-gzip ``.gz`` archive, or a size above the input limits
(``stint.model.limits``: GPUs of one job, a batch size, rows of a trace read whole). Nothing is
returned (so nothing is simulated or written) unless every row read is valid.

A trace is read whole and sorted by arrival, except a CSV path with ``Filters.limit``: that file
is streamed, in its own order, only up to its ``limit``-th kept row (or the end of the arrival
window), so it must be sorted by arrival; a row out of order among those read is an error, and
the rows after are not read at all. The shipped traces are always read whole.

``load("philly-shaped:N[:GPUS]")`` generates a trace of any length from the shipped Philly
trace's distributions (``philly_shaped(n, gpus, seed)``, seeded with NumPy's PCG64): each job's
(GPUs, duration, virtual cluster) is one row of the Philly trace drawn uniformly with
replacement, so sizes and durations keep their joint distribution; inter-arrival gaps are drawn
the same way from the trace's own gaps, then divided by ``gpus / reference_gpus`` and by
``load``: on ``gpus`` GPUs the generated trace offers, on average, the load the Philly trace
offers ``reference_gpus`` (512, the simulator's default Philly cluster) times ``load``.

Fields a trace lacks are filled by a seeded rule (``--seed``), drawn per job in arrival order:
- utility: OASiS' sigmoid (paper §5): γ1 (priority) ~ U[1, 100]; class 10% time-insensitive
  (constant γ1/2), 55% time-sensitive (γ2 ~ U[0.01, 1]), 35% time-critical (γ2 ~ U[4, 6]);
  target γ3 = the job's ideal run time plus U[1, 15] one-hour slots;
- tier: by job count, shares ``tiers`` (default 10% premium, 60% standard, 30% basic; ``stint sim
  --tiers premium=0.1,standard=0.3,basic=0.6``), one uniform draw per job so the other fields do
  not depend on the shares;
- workers: rigid (min = max = requested), because a recorded duration is only known at the
  requested size; with ``elastic=True``, min = max(1, requested // 2) and max = 2 x requested.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import random
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from stint import data_path
from stint.model.job import JobSpec, Tier
from stint.model.limits import MAX_BATCH_SIZE, MAX_CLUSTER_GPUS, MAX_JOB_GPUS, MAX_TRACE_JOBS, above
from stint.model.utility import ConstantUtility, SigmoidUtility, Utility
from stint.perf.model import PerfModel
from stint.perf.profile import APPLICATIONS, ProfileModel, has_progress_tables, work
from stint.perf.scaling import ScalingModel
from stint.perf.types import GavelThroughputs, TypeSpeeds
from stint.sim.trace_fields import TraceError, count, number

PHILLY_COLUMNS = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"]
POLLUX_COLUMNS = ["name", "time", "application", "num_replicas", "batch_size"]
EST_COLUMN = "est_s"  # optional last column of either format: the user's declared run time (s)


# What a job's ``work`` counts, per trace format (``summary.json`` states it as ``job_model``).
JOB_MODELS = {
    "recorded-duration": "seconds of the recorded run at the requested size (Philly format)",
    "pollux-progress": "samples to the application's last epoch at the job's batch size, weighted "
    "by statistical efficiency (Pollux format, applications with validation tables)",
    "samples": "epochs x samples per epoch, whatever the batch size (Pollux format otherwise)",
    "gavel-steps": "total_steps as seconds on the job's fastest accelerator type at its scale factor "
    "(Gavel format; each type's speed from the throughput file)",
}


@dataclass(frozen=True)
class Trace:
    name: str
    jobs: list[JobSpec]
    perf: PerfModel
    source: str
    format: str  # "philly" or "pollux": what the file's header says, whatever its name
    job_model: str  # what a job's work means: see JOB_MODELS
    clock0_s: float = 0.0  # time of day (s after midnight) of trace time 0: Philly's first kept job
    # Per (application, accelerator type) speeds the trace brings (Gavel's throughputs), or None.
    speeds: TypeSpeeds | None = None


@dataclass(frozen=True, slots=True)
class Filters:
    """Which jobs to keep: ``vc`` (virtual cluster), arrival window in seconds from the trace's
    first submission ``[start_s, end_s)``, then the first ``limit`` jobs by arrival."""

    limit: int | None = None
    vc: str | None = None
    start_s: float | None = None
    end_s: float | None = None


@dataclass(frozen=True, slots=True)
class TierMix:
    """Shares of jobs per tier for traces without tiers (they must sum to 1)."""

    premium: float = 0.1
    standard: float = 0.6
    basic: float = 0.3

    def __post_init__(self) -> None:
        shares = (self.premium, self.standard, self.basic)
        if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-6:
            raise ValueError(f"tier shares must be >= 0 and sum to 1 (got premium={self.premium:g}, "
                             f"standard={self.standard:g}, basic={self.basic:g})")

    @staticmethod
    def parse(text: str) -> TierMix:
        """``premium=0.1,standard=0.3,basic=0.6`` (tiers left out get 0)."""
        shares = {"premium": 0.0, "standard": 0.0, "basic": 0.0}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in shares:
                raise ValueError(f"--tiers {text!r}: expected premium=X,standard=Y,basic=Z (got {part!r})")
            try:
                shares[key] = float(value)
            except ValueError:
                raise ValueError(f"--tiers {text!r}: {key}'s share {value!r} is not a number") from None
        return TierMix(**shares)

    def draw(self, u: float) -> Tier:
        if u < self.premium:
            return Tier.PREMIUM
        return Tier.STANDARD if u < self.premium + self.standard else Tier.BASIC


def load(
    spec: str, *, seed: int = 0, filters: Filters = Filters(), elastic: bool = False, samples: bool = False,
    tiers: TierMix = TierMix(), throughputs: GavelThroughputs | None = None,
) -> Trace:
    """Load ``philly``, ``pollux:N`` (N = 1..8), ``philly-shaped:N[:GPUS]`` (generated:
    ``philly_shaped``) or a CSV path in either format (.csv or .csv.gz).

    Pollux-format jobs follow Pollux's job model (``pollux-progress``) when every application
    in the trace ships validation tables, else (or with ``samples=True``) the sample count."""
    if filters.limit is not None and (why := above("the limit", filters.limit, MAX_TRACE_JOBS)):
        raise TraceError(why)
    if spec.startswith("philly-shaped:"):
        jobs_n, gpus = parse_shaped(spec)
        trace = philly_shaped(jobs_n, gpus, seed=seed, elastic=elastic)
        kept = [j for j in trace.jobs if _keep(j.arrival_s, j.vc, filters)][: filters.limit]
        return replace(trace, jobs=kept)
    if spec == "philly":
        path, label = data_path("philly.csv.gz"), "philly"
    elif spec.startswith("pollux:"):
        n = spec.split(":", 1)[1]
        if n not in {str(i) for i in range(1, 9)}:
            raise TraceError(f"unknown Pollux workload {n!r}; valid: pollux:1 .. pollux:8")
        path, label = data_path(f"pollux/workloads/workload-{n}.csv.gz"), spec
    else:
        path, label = Path(spec), Path(spec).name
        if not path.is_file():
            raise TraceError(f"{spec}: no such trace file (or use 'philly' or 'pollux:N')")
    shipped = spec == "philly" or spec.startswith("pollux:")  # read whole: Philly's is not in arrival order
    if not shipped and _first_line_is_gavel(path):
        return _gavel(path, label, filters, seed, elastic, tiers, throughputs)
    with _open(path) as fh:
        reader = _Reader(fh, str(path))
        header = next(reader, None)
        perf: PerfModel
        clock0 = 0.0
        pick = _Pick(str(path), filters, stream=filters.limit is not None and not shipped)
        est = header is not None and bool(header) and header[-1] == EST_COLUMN
        columns = header[:-1] if header is not None and est else header
        if columns == PHILLY_COLUMNS:
            jobs, clock0 = _philly(reader, str(path), pick, est)
            perf, fmt, model = ScalingModel(), "philly", "recorded-duration"
        elif columns == POLLUX_COLUMNS:
            jobs, fmt = _pollux(reader, str(path), pick, est), "pollux"
            jobs, perf, model = _pollux_job_model(jobs, samples)
        else:
            raise TraceError(
                f"{path}:1: unrecognised header {header}; expected {PHILLY_COLUMNS} (Philly) "
                f"or {POLLUX_COLUMNS} (Pollux), either with an optional last column {EST_COLUMN!r}, "
                "or a Gavel trace (ten tab-separated fields per line, no header)"
            )
    return Trace(label, fill_missing(jobs, seed, elastic, tiers), perf, str(path), fmt, model, clock0)


def _first_line_is_gavel(path: Path) -> bool:
    from stint.sim.gavel_trace import is_gavel

    try:
        with _open(path) as fh:
            first = fh.readline(1 << 16).decode("utf-8", "replace")
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError):
        return False  # the CSV reader names what is wrong
    return is_gavel(first)


def _gavel(path: Path, label: str, filters: Filters, seed: int, elastic: bool, tiers: TierMix,
           throughputs: GavelThroughputs | None) -> Trace:
    """A Gavel trace (``stint.sim.gavel_trace``): arrivals from 0, Gavel's priority weights kept."""
    from stint.sim.gavel_trace import gavel_rows

    pick = _Pick(str(path), filters, stream=filters.limit is not None)
    with _open(path) as fh:
        rows = gavel_rows(_numbered(fh, str(path)), str(path), throughputs)
        kept, _ = pick.rows(rows, from_first=False)
    jobs = [spec for _t, _line, _vc, spec in kept]
    filled = [replace(f, priority=j.priority)
              for f, j in zip(fill_missing(jobs, seed, elastic, tiers), jobs, strict=True)]
    speeds = throughputs.speeds() if throughputs is not None else None
    return Trace(label, filled, ScalingModel(), str(path), "gavel", "gavel-steps", 0.0, speeds)


def _numbered(fh: Iterable[bytes], path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line; bad UTF-8 or a broken archive is a TraceError at its line."""
    n = 0
    it = iter(fh)
    while True:
        n += 1
        try:
            raw = next(it)
        except StopIteration:
            return
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise TraceError(f"{path}:{n}: not a readable archive ({exc})") from None
        try:
            yield n, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(f"{path}:{n}: not UTF-8 text ({exc.reason})") from None


def _open(path: Path) -> gzip.GzipFile | io.BufferedReader:
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _lines(fh: Iterable[bytes]) -> Iterator[str]:
    """The file's lines, each decoded on its own (so a bad byte is blamed on its own line)."""
    for raw in fh:
        yield raw.decode("utf-8")


class _Reader:
    """``csv.reader`` (strict: an unterminated quote is an error, not a row swallowing the rest
    of the file) whose every failure -- CSV, UTF-8, gzip -- is a TraceError naming the line
    where the failing row starts."""

    def __init__(self, fh: Iterable[bytes], path: str) -> None:
        self._reader = csv.reader(_lines(fh), strict=True)
        self.path = path
        self.line_num = 0

    def __iter__(self) -> Iterator[list[str]]:
        return self

    def __next__(self) -> list[str]:
        start = self._reader.line_num + 1
        try:
            row = next(self._reader)
        except csv.Error as exc:
            why = str(exc)
            if "unexpected end of data" in why:
                why = "unterminated quote (the quoted field runs to the end of the file)"
            raise TraceError(f"{self.path}:{start}: {why}") from None
        except UnicodeDecodeError as exc:
            raise TraceError(f"{self.path}:{start}: not UTF-8 text ({exc.reason})") from None
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            what = "truncated archive" if isinstance(exc, EOFError) else "not a valid gzip file"
            raise TraceError(f"{self.path}:{start}: {what} ({exc})") from None
        self.line_num = self._reader.line_num
        return row


def _rows(reader: _Reader, path: str, width: int) -> Iterator[tuple[int, list[str]]]:
    for row in reader:
        line = reader.line_num
        if not row:
            continue
        if len(row) != width:
            raise TraceError(f"{path}:{line}: expected {width} fields, got {len(row)}: {row}")
        yield line, row


P = TypeVar("P")
# A parsed row: arrival (s), line, virtual cluster ("" where the format has none), the rest.
Row = tuple[float, int, str, P]


@dataclass(frozen=True, slots=True)
class _Pick:
    """The rows of one file that ``filters`` keep, the file read whole (at most ``max_rows``
    rows) or streamed (``stream``: up to the ``limit``-th kept row, the file in arrival order;
    module docstring)."""

    path: str
    filters: Filters
    stream: bool
    max_rows: int = MAX_TRACE_JOBS

    def rows(self, rows: Iterable[Row[P]], from_first: bool) -> tuple[list[Row[P]], float]:
        """The kept rows by (arrival, line), and the time the window's offsets count from: the
        first submission when ``from_first`` (Philly's timestamps), else 0."""
        if self.stream:
            return self._streamed(rows, from_first)
        raw = []
        for n, row in enumerate(rows, 1):
            if n > self.max_rows:
                raise TraceError(f"{self.path}:{row[1]}: more than {self.max_rows:,} rows, the most a trace read "
                                 "whole may have (docs/simulator.md, \"Input limits\"); with --limit N the file is "
                                 "read only up to its Nth job")
            raw.append(row)
        t0 = min((r[0] for r in raw), default=0.0) if from_first else 0.0
        kept = sorted((r for r in raw if _keep(r[0] - t0, r[2], self.filters)), key=lambda r: (r[0], r[1]))
        return kept[: self.filters.limit], t0

    def _streamed(self, rows: Iterable[Row[P]], from_first: bool) -> tuple[list[Row[P]], float]:
        f, kept = self.filters, []
        t0: float | None = None
        last_t, last_line = -math.inf, 0
        for row in rows:
            t, line = row[0], row[1]
            if t < last_t:
                raise TraceError(f"{self.path}:{line}: row out of arrival order (it arrives before line "
                                 f"{last_line}); with --limit the file is read only up to its Nth job, so its rows "
                                 "must be sorted by arrival (sort them, or run without --limit)")
            last_t, last_line = t, line
            if t0 is None:
                t0 = t if from_first else 0.0
            if f.end_s is not None and t - t0 >= f.end_s:
                break  # in arrival order: no later row is in the window
            if _keep(t - t0, row[2], f):
                kept.append(row)
                if len(kept) == f.limit:
                    break
        return kept, t0 or 0.0


def _est(path: str, line: int, text: str) -> float | None:
    """A row's declared run time: empty for none, else a positive number of seconds."""
    return None if not text.strip() else number(path, line, EST_COLUMN, text, float, 1e-9)


def _philly(reader: _Reader, path: str, pick: _Pick, est: bool) -> tuple[list[JobSpec], float]:
    """The kept jobs, arrivals from the first kept one, and that one's time of day (s)."""
    kept, t0 = pick.rows(_philly_rows(reader, path, est), from_first=True)
    base = kept[0][0] if kept else t0
    return [
        JobSpec(
            job_id=f"philly-{line - 1}",
            arrival_s=t - base,
            work=d,
            requested_workers=g,
            min_workers=g,
            max_workers=g,
            vc=vc,
            user=vc,
            duration_s=d,
            est_s=e,
        )
        for t, line, vc, (d, g, e) in kept
    ], base % 86400.0


def _philly_rows(reader: _Reader, path: str, est: bool) -> Iterator[Row[tuple[float, int, float | None]]]:
    """Each row checked, as it is read: (arrival, line, vc, (duration, GPUs, declared est_s))."""
    from datetime import UTC, datetime  # (Philly's timestamps only)

    for line, row in _rows(reader, path, 6 if est else 5):
        ts, duration, gpus, _gpu_time, vc = row[:5]
        try:
            t = datetime.fromisoformat(ts).replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise TraceError(f"{path}:{line}: field 'timestamp' is not YYYY-MM-DD HH:MM:SS: {ts!r}") from None
        d = number(path, line, "duration", duration, float, 1e-9)
        g = count(path, line, "num_gpus", gpus, MAX_JOB_GPUS)
        if not vc:
            raise TraceError(f"{path}:{line}: field 'cluster' is empty")
        yield t, line, vc, (d, g, _est(path, line, row[5]) if est else None)


def _pollux(reader: _Reader, path: str, pick: _Pick, est: bool) -> list[JobSpec]:
    kept, _ = pick.rows(_pollux_rows(reader, path, est), from_first=False)
    jobs = []
    for t, _line, _vc, (name, app, n, b, e) in kept:
        a = APPLICATIONS[app]
        jobs.append(
            JobSpec(
                job_id=name,
                arrival_s=t,
                work=a.work_samples,
                requested_workers=n,
                min_workers=1,
                # Elastic up to the batch's worth of minimum local batches, as Pollux's Optimus;
                # NCF stays on one replica, as in Pollux's simulator.
                max_workers=n if app == "ncf" else max(n, b // a.min_local_bsz),
                application=app,
                batch_size=b,
                est_s=e,
            )
        )
    return jobs


def _pollux_rows(reader: _Reader, path: str, est: bool
                 ) -> Iterator[Row[tuple[str, str, int, int, float | None]]]:
    """Each row checked, as it is read: (arrival, line, "", (name, application, replicas, batch,
    declared est_s))."""
    for line, row in _rows(reader, path, 6 if est else 5):
        name, time_s, app, replicas, bsz = row[:5]
        if app not in APPLICATIONS:
            raise TraceError(f"{path}:{line}: unknown application {app!r}; known: {', '.join(APPLICATIONS)}")
        t = number(path, line, "time", time_s, float, 0.0)
        n = count(path, line, "num_replicas", replicas, MAX_JOB_GPUS)
        b = count(path, line, "batch_size", bsz, MAX_BATCH_SIZE)
        yield t, line, "", (name or f"job-{line - 1}", app, n, b, _est(path, line, row[5]) if est else None)


def _pollux_job_model(jobs: list[JobSpec], samples: bool) -> tuple[list[JobSpec], PerfModel, str]:
    """Pollux's job model (work at each job's batch size) if every application has its tables."""
    if samples or not all(has_progress_tables(j.application) for j in jobs):
        return jobs, ProfileModel(), "samples"
    worked = [replace(j, work=work(j.application, j.batch_size)) for j in jobs]
    return worked, ProfileModel(progress=True), "pollux-progress"


def scale_load(trace: Trace, load: float) -> Trace:
    """The trace at ``load`` times its arrival rate: every arrival time divided by ``load``
    (as Pollux's simulator scales its workloads); ``load`` 1 returns it unchanged."""
    if load <= 0:
        raise TraceError(f"load must be positive (got {load:g})")
    if load == 1.0:
        return trace
    jobs = [replace(j, arrival_s=j.arrival_s / load) for j in trace.jobs]
    return replace(trace, name=f"{trace.name}@{load:g}x", jobs=jobs)


def _keep(offset_s: float, vc: str, f: Filters) -> bool:
    if f.vc is not None and vc != f.vc:
        return False
    if f.start_s is not None and offset_s < f.start_s:
        return False
    return f.end_s is None or offset_s < f.end_s


def fill_missing(jobs: list[JobSpec], seed: int, elastic: bool,
                 tiers: TierMix | None = None) -> list[JobSpec]:
    rng = random.Random(seed)
    out = []
    for spec in jobs:
        utility, priority, tier = missing_fields(rng, spec.duration_s, tiers)
        lo, hi = spec.min_workers, spec.max_workers
        if elastic and lo == hi:
            lo, hi = max(1, spec.requested_workers // 2), 2 * spec.requested_workers
        out.append(replace(spec, utility=utility, priority=priority, tier=tier, min_workers=lo, max_workers=hi))
    return out


def missing_fields(rng: random.Random, duration_s: float | None,
                   tiers: TierMix | None = None) -> tuple[Utility, float, Tier]:
    """One job's utility, priority and tier by the seeded rule (draws in this order; tiers by
    ``tiers``' shares, default 0.1 / 0.6 / 0.3)."""
    utility, priority = _utility(rng, duration_s or 3600.0)
    return utility, priority, (tiers or TierMix()).draw(rng.random())


def _utility(rng: random.Random, ideal_s: float) -> tuple[Utility, float]:
    gamma1 = rng.uniform(1.0, 100.0)
    cls = rng.random()
    gamma3 = ideal_s / 3600.0 + rng.uniform(1.0, 15.0)
    if cls < 0.10:
        return ConstantUtility(gamma1 / 2.0), gamma1
    gamma2 = rng.uniform(0.01, 1.0) if cls < 0.65 else rng.uniform(4.0, 6.0)
    return SigmoidUtility(gamma1, gamma2, gamma3, slot_s=3600.0), gamma1


# -- generated: philly-shaped traces ---------------------------------------------------------
REFERENCE_GPUS = 512


def philly_shaped(
    n: int, gpus: int = REFERENCE_GPUS, seed: int = 0, load_factor: float = 1.0,
    reference_gpus: int = REFERENCE_GPUS, elastic: bool = False,
) -> Trace:
    """``n`` jobs shaped like the shipped Philly trace, arriving at a rate scaled to ``gpus``."""
    if n <= 0 or gpus <= 0 or load_factor <= 0 or reference_gpus <= 0:
        raise TraceError(f"philly-shaped: jobs, GPUs and load must be positive (got n={n}, "
                         f"gpus={gpus}, load={load_factor:g}, reference_gpus={reference_gpus})")
    import numpy as np  # generated traces only

    src, source_gaps = _source()
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(src), size=n)
    gaps = rng.choice(source_gaps, size=n - 1) * (reference_gpus / gpus) / load_factor
    times = np.concatenate(([0.0], np.cumsum(gaps))).tolist()
    fields = random.Random(seed)  # the seeded rule of every trace, drawn in arrival order
    jobs = []
    for i, (row, t) in enumerate(zip(rows.tolist(), times, strict=True)):
        s = src[row]
        g = s.requested_workers
        lo, hi = (max(1, g // 2), 2 * g) if elastic else (g, g)
        utility, priority, tier = missing_fields(fields, s.duration_s)
        jobs.append(JobSpec(job_id=f"ps-{i}", arrival_s=t, work=s.work, requested_workers=g,
                            min_workers=lo, max_workers=hi, utility=utility, priority=priority,
                            tier=tier, vc=s.vc, user=s.user, duration_s=s.duration_s))
    name = f"philly-shaped:{n}" + (f":{gpus}" if gpus != reference_gpus else "")
    return Trace(name, jobs, ScalingModel(), "generated from philly", "philly", "recorded-duration")


@cache
def _source() -> tuple[list[JobSpec], Any]:
    """The shipped Philly trace's jobs and inter-arrival gaps (read once per process)."""
    import numpy as np

    jobs = load("philly").jobs
    return jobs, np.diff(np.array([j.arrival_s for j in jobs]))


def parse_shaped(spec: str) -> tuple[int, int]:
    """``philly-shaped:N[:GPUS]`` -> (N, GPUS); TraceError naming the spec otherwise."""
    parts = spec.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        n = int(parts[1])
        gpus = int(parts[2]) if len(parts) == 3 else REFERENCE_GPUS
    except ValueError:
        raise TraceError(f"{spec!r}: expected philly-shaped:N or philly-shaped:N:GPUS "
                         "(N jobs, arrival rate scaled to GPUS GPUs)") from None
    if n <= 0 or gpus <= 0:
        raise TraceError(f"{spec!r}: N and GPUS must be positive")
    if why := above("N (jobs)", n, MAX_TRACE_JOBS) or above("GPUS", gpus, MAX_CLUSTER_GPUS):
        raise TraceError(f"--trace {spec}: {why}")
    return n, gpus
