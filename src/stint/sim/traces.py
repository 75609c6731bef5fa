"""Trace readers: the Philly job log and Pollux workloads, shipped or by path.

``load("philly")``, ``load("pollux:6")`` or ``load(path)`` return a ``Trace``: job specs sorted by
arrival (seconds from the first kept job) and the performance model their work is measured in.
A malformed row raises ``TraceError`` naming the file, the line and the reason.

Fields a trace lacks are filled by a seeded rule (``--seed``), drawn per job in arrival order:
- utility: OASiS' sigmoid (paper §5): γ1 (priority) ~ U[1, 100]; class 10% time-insensitive
  (constant γ1/2), 55% time-sensitive (γ2 ~ U[0.01, 1]), 35% time-critical (γ2 ~ U[4, 6]);
  target γ3 = the job's ideal run time plus U[1, 15] one-hour slots;
- tier: 10% premium, 60% standard, 30% basic;
- workers: rigid (min = max = requested), because a recorded duration is only known at the
  requested size; with ``elastic=True``, min = max(1, requested // 2) and max = 2 x requested.
"""

from __future__ import annotations

import csv
import gzip
import io
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import IO

from stint.model.job import JobSpec, Tier
from stint.model.utility import ConstantUtility, SigmoidUtility, Utility
from stint.perf.profile import APPLICATIONS, ProfileModel, has_progress_tables, work
from stint.perf.scaling import ScalingModel
from stint.policies.base import PerfModel

PHILLY_COLUMNS = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"]
POLLUX_COLUMNS = ["name", "time", "application", "num_replicas", "batch_size"]


# What a job's ``work`` counts, per trace format (``summary.json`` states it as ``job_model``).
JOB_MODELS = {
    "recorded-duration": "seconds of the recorded run at the requested size (Philly format)",
    "pollux-progress": "samples to the application's last epoch at the job's batch size, weighted "
    "by statistical efficiency (Pollux format, applications with validation tables)",
    "samples": "epochs x samples per epoch, whatever the batch size (Pollux format otherwise)",
}


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file, line and reason."""


@dataclass(frozen=True)
class Trace:
    name: str
    jobs: list[JobSpec]
    perf: PerfModel
    source: str
    format: str  # "philly" or "pollux": what the file's header says, whatever its name
    job_model: str  # what a job's work means: see JOB_MODELS


@dataclass(frozen=True, slots=True)
class Filters:
    """Which jobs to keep: ``vc`` (virtual cluster), arrival window in seconds from the trace's
    first submission ``[start_s, end_s)``, then the first ``limit`` jobs by arrival."""

    limit: int | None = None
    vc: str | None = None
    start_s: float | None = None
    end_s: float | None = None


def load(
    spec: str, *, seed: int = 0, filters: Filters = Filters(), elastic: bool = False, samples: bool = False
) -> Trace:
    """Load ``philly``, ``pollux:N`` (N = 1..8), ``philly-shaped:N[:GPUS]`` (generated:
    ``stint.sim.generate``) or a CSV path in either format (.csv or .csv.gz).

    Pollux-format jobs follow Pollux's job model (``pollux-progress``) when every application
    in the trace ships validation tables, else (or with ``samples=True``) the sample count."""
    if spec.startswith("philly-shaped:"):
        from stint.sim import generate

        jobs_n, gpus = generate.parse(spec)
        trace = generate.philly_shaped(jobs_n, gpus, seed=seed, elastic=elastic)
        kept = [j for j in trace.jobs if _keep(j.arrival_s, j.vc, filters)][: filters.limit]
        return replace(trace, jobs=kept)
    if spec == "philly":
        path, label = _data_path("philly.csv.gz"), "philly"
    elif spec.startswith("pollux:"):
        n = spec.split(":", 1)[1]
        if n not in {str(i) for i in range(1, 9)}:
            raise TraceError(f"unknown Pollux workload {n!r}; valid: pollux:1 .. pollux:8")
        path, label = _data_path(f"pollux/workloads/workload-{n}.csv.gz"), spec
    else:
        path, label = Path(spec), Path(spec).name
        if not path.is_file():
            raise TraceError(f"{spec}: no such trace file (or use 'philly' or 'pollux:N')")
    with _open(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        perf: PerfModel
        if header == PHILLY_COLUMNS:
            jobs, perf, fmt, model = _philly(reader, str(path), filters), ScalingModel(), "philly", "recorded-duration"
        elif header == POLLUX_COLUMNS:
            jobs, fmt = _pollux(reader, str(path), filters), "pollux"
            jobs, perf, model = _pollux_job_model(jobs, samples)
        else:
            raise TraceError(
                f"{path}:1: unrecognised header {header}; expected {PHILLY_COLUMNS} (Philly) "
                f"or {POLLUX_COLUMNS} (Pollux)"
            )
    return Trace(label, fill_missing(jobs, seed, elastic), perf, str(path), fmt, model)


def _data_path(name: str) -> Path:
    return Path(str(resources.files("stint") / "data" / name))


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _rows(reader: Iterator[list[str]], path: str, width: int) -> Iterator[tuple[int, list[str]]]:
    for row in reader:
        line = reader.line_num  # type: ignore[attr-defined]
        if not row:
            continue
        if len(row) != width:
            raise TraceError(f"{path}:{line}: expected {width} fields, got {len(row)}: {row}")
        yield line, row


def _number(path: str, line: int, field: str, text: str, kind: type = float, low: float = 0.0) -> float:
    try:
        value = float(kind(text))
    except ValueError:
        raise TraceError(f"{path}:{line}: field {field!r} is not a {kind.__name__}: {text!r}") from None
    if value < low:
        raise TraceError(f"{path}:{line}: field {field!r} must be >= {low:g}, got {text!r}")
    return value


def _philly(reader: Iterator[list[str]], path: str, f: Filters) -> list[JobSpec]:
    raw: list[tuple[float, int, float, int, str]] = []
    for line, (ts, duration, gpus, _gpu_time, vc) in _rows(reader, path, 5):
        try:
            t = datetime.fromisoformat(ts).replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise TraceError(f"{path}:{line}: field 'timestamp' is not YYYY-MM-DD HH:MM:SS: {ts!r}") from None
        d = _number(path, line, "duration", duration, float, 1e-9)
        g = int(_number(path, line, "num_gpus", gpus, int, 1))
        if not vc:
            raise TraceError(f"{path}:{line}: field 'cluster' is empty")
        raw.append((t, line, d, g, vc))
    if not raw:
        return []
    t0 = min(r[0] for r in raw)
    kept = [r for r in raw if _keep(r[0] - t0, r[4], f)]
    kept.sort(key=lambda r: (r[0], r[1]))
    if f.limit is not None:
        kept = kept[: f.limit]
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
        )
        for t, line, d, g, vc in kept
    ]


def _pollux(reader: Iterator[list[str]], path: str, f: Filters) -> list[JobSpec]:
    raw: list[tuple[float, int, str, str, int, int]] = []
    for line, (name, time_s, app, replicas, bsz) in _rows(reader, path, 5):
        if app not in APPLICATIONS:
            raise TraceError(f"{path}:{line}: unknown application {app!r}; known: {', '.join(APPLICATIONS)}")
        t = _number(path, line, "time", time_s, float, 0.0)
        n = int(_number(path, line, "num_replicas", replicas, int, 1))
        b = int(_number(path, line, "batch_size", bsz, int, 1))
        raw.append((t, line, name or f"job-{line - 1}", app, n, b))
    kept = sorted((r for r in raw if _keep(r[0], "", f)), key=lambda r: (r[0], r[1]))
    if f.limit is not None:
        kept = kept[: f.limit]
    jobs = []
    for t, _line, name, app, n, b in kept:
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
            )
        )
    return jobs


def _pollux_job_model(jobs: list[JobSpec], samples: bool) -> tuple[list[JobSpec], PerfModel, str]:
    """Pollux's job model (work at each job's batch size) if every application has its tables."""
    if samples or not all(has_progress_tables(j.application) for j in jobs):
        return jobs, ProfileModel(), "samples"
    return [replace(j, work=work(j.application, j.batch_size)) for j in jobs], ProfileModel(progress=True), "pollux-progress"


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


def fill_missing(jobs: list[JobSpec], seed: int, elastic: bool) -> list[JobSpec]:
    rng = random.Random(seed)
    out = []
    for spec in jobs:
        utility, priority, tier = missing_fields(rng, spec.duration_s)
        lo, hi = spec.min_workers, spec.max_workers
        if elastic and lo == hi:
            lo, hi = max(1, spec.requested_workers // 2), 2 * spec.requested_workers
        out.append(replace(spec, utility=utility, priority=priority, tier=tier, min_workers=lo, max_workers=hi))
    return out


def missing_fields(rng: random.Random, duration_s: float | None) -> tuple[Utility, float, Tier]:
    """One job's utility, priority and tier by the seeded rule (draws in this order)."""
    utility, priority = _utility(rng, duration_s or 3600.0)
    u = rng.random()
    return utility, priority, Tier.PREMIUM if u < 0.1 else Tier.STANDARD if u < 0.7 else Tier.BASIC


def _utility(rng: random.Random, ideal_s: float) -> tuple[Utility, float]:
    gamma1 = rng.uniform(1.0, 100.0)
    cls = rng.random()
    gamma3 = ideal_s / 3600.0 + rng.uniform(1.0, 15.0)
    if cls < 0.10:
        return ConstantUtility(gamma1 / 2.0), gamma1
    gamma2 = rng.uniform(0.01, 1.0) if cls < 0.65 else rng.uniform(4.0, 6.0)
    return SigmoidUtility(gamma1, gamma2, gamma3, slot_s=3600.0), gamma1
