"""Throughput per (job, accelerator type): how much faster or slower a job trains on each type.

A job's ``work`` is measured on its *reference* accelerator; ``TypeSpeeds.factor(app, type)`` is
the job's throughput on ``type`` relative to that reference, and ``TypedPerf`` multiplies any
performance model's rate by it, so the step rate follows the type a job runs on:

    rate(job, allocation on type t) = base.rate(job, allocation) x factor(job.application, t)

Lookup: the table's entry for (application, type); for a pair the table lacks, the type's
default speed (a cluster file's ``speed`` of the group, 1.0 when not given); for a type the
cluster file does not name either, 1.0. So on an untyped table every job runs at its base rate.

Gavel's throughput file (``simulation_throughputs.json``: worker type -> "('JOB TYPE',
SCALE_FACTOR)" -> "null" -> steps/s alone) is read by ``read_gavel_throughputs``; a Gavel job's
reference is its fastest type (``GavelThroughputs.speeds``: factor = steps/s on the type over
steps/s on the fastest, and its work is its run time there, ``traces``).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from stint.model.allocation import Allocation
from stint.model.cluster import Cluster
from stint.model.job import JobSpec
from stint.perf.model import PerfModel


@dataclass(frozen=True, slots=True)
class TypeSpeeds:
    """Relative throughput per (application, type), with a default per type (see the module)."""

    table: dict[tuple[str, str], float] = field(default_factory=dict)
    default: dict[str, float] = field(default_factory=dict)

    def factor(self, application: str, gpu_type: str) -> float:
        got = self.table.get((application, gpu_type))
        if got is not None:
            return got
        return self.default.get(gpu_type, 1.0)

    def merged(self, other: TypeSpeeds) -> TypeSpeeds:
        """This table with ``other``'s entries and defaults over it."""
        return TypeSpeeds({**self.table, **other.table}, {**self.default, **other.default})


class TypedPerf:
    """``base``'s rate times the job's factor on its allocation's type (the slowest type's, for
    an allocation that mixes types, which the ledger never accepts)."""

    def __init__(self, base: PerfModel, cluster: Cluster, speeds: TypeSpeeds) -> None:
        self.base, self.cluster, self.speeds = base, cluster, speeds
        self._node_type = [n.gpu_type for n in cluster.nodes]

    def rate(self, spec: JobSpec, allocation: Allocation) -> float:
        r = self.base.rate(spec, allocation)
        if not allocation or r == 0.0:
            return r
        kinds = {self._node_type[n] for n, _ in allocation.workers}
        return r * min(self.speeds.factor(spec.application, t) for t in kinds)


class ThroughputError(ValueError):
    """A throughput file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True, slots=True)
class GavelThroughputs:
    """Steps per second alone, per (job type, scale factor) and worker type (Gavel's "null")."""

    steps_per_s: dict[tuple[str, int], dict[str, float]]
    source: str

    def of(self, job_type: str, scale_factor: int) -> dict[str, float] | None:
        return self.steps_per_s.get((job_type, scale_factor))

    def speeds(self) -> TypeSpeeds:
        """Each job type's factor per type: its throughput there over its fastest type's."""
        table: dict[tuple[str, str], float] = {}
        for (job_type, scale), row in self.steps_per_s.items():
            top = max(row.values(), default=0.0)
            if top > 0:
                for t, v in row.items():
                    table[(application_of(job_type, scale), t)] = v / top
        return TypeSpeeds(table)


def application_of(job_type: str, scale_factor: int) -> str:
    """The ``JobSpec.application`` of a Gavel job: its job type and scale factor."""
    return f"{job_type} x{scale_factor}"


def read_gavel_throughputs(path: Path) -> GavelThroughputs:
    """Gavel's throughput JSON (see the module); only the isolated ("null") entries are used."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ThroughputError(f"{path}: cannot read the throughput file ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ThroughputError(f"{path}: not JSON ({exc})") from None
    if not isinstance(raw, dict) or not raw:
        raise ThroughputError(f"{path}: expected an object of worker types")
    out: dict[tuple[str, int], dict[str, float]] = {}
    for worker, jobs in raw.items():
        if not isinstance(jobs, dict):
            raise ThroughputError(f"{path}: worker type {worker!r}: expected an object of job types")
        for key, entry in jobs.items():
            job = _job_key(path, worker, key)
            alone = entry.get("null") if isinstance(entry, dict) else None
            if isinstance(alone, bool) or not isinstance(alone, int | float) or not math.isfinite(alone) or alone < 0:
                raise ThroughputError(f"{path}: {worker} / {key}: \"null\" must be a number >= 0 "
                                      f"(steps/s alone; got {alone!r})")
            out.setdefault(job, {})[str(worker)] = float(alone)
    return GavelThroughputs(out, str(path))


def _job_key(path: Path, worker: str, key: str) -> tuple[str, int]:
    try:
        got = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        got = None
    if (not isinstance(got, tuple) or len(got) != 2 or not isinstance(got[0], str)
            or not isinstance(got[1], int) or got[1] < 1):
        raise ThroughputError(f"{path}: {worker}: job key {key!r} is not ('JOB TYPE', SCALE_FACTOR)")
    return got[0], got[1]
