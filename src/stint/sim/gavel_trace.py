"""Gavel's trace format: one job per line, ten tab-separated fields, no header.

    job_type  command  working_directory  num_steps_arg  needs_data_dir  total_steps
    scale_factor  priority_weight  SLO  arrival_time

Of these stint uses ``job_type`` (with ``scale_factor``, the key of the throughput file),
``total_steps``, ``scale_factor`` (the job's GPUs: a rigid job), ``priority_weight`` (its
``priority``) and ``arrival_time`` (s); the command fields are not run. A job's ``work`` is its
run time on its fastest type at its scale factor (``total_steps`` / steps per second there, from
the throughput file, ``perf.types.GavelThroughputs``), and each type's speed for it is its
throughput there over the fastest's; a type on which it has no throughput (0 in the file) is
left out of its ``gpu_types`` (it cannot run there). A job type the file lacks is an error.
"""

from __future__ import annotations

from collections.abc import Iterator

from stint.model.job import JobSpec
from stint.model.limits import MAX_JOB_GPUS
from stint.perf.types import GavelThroughputs, application_of
from stint.sim.trace_fields import TraceError, count, number

GAVEL_FIELDS = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
                "total_steps", "scale_factor", "priority_weight", "SLO", "arrival_time")


def is_gavel(first_line: str) -> bool:
    """True if a file's first line looks like a Gavel trace row (ten tab-separated fields)."""
    return first_line.count("\t") == len(GAVEL_FIELDS) - 1


def gavel_rows(lines: Iterator[tuple[int, str]], path: str, tput: GavelThroughputs | None
               ) -> Iterator[tuple[float, int, str, JobSpec]]:
    """Each line checked as it is read: (arrival, line, "", the job, arriving at its arrival)."""
    for line, text in lines:
        if not text.strip():
            continue
        row = text.rstrip("\r\n").split("\t")
        if len(row) != len(GAVEL_FIELDS):
            raise TraceError(f"{path}:{line}: expected {len(GAVEL_FIELDS)} tab-separated fields "
                             f"({', '.join(GAVEL_FIELDS)}), got {len(row)}")
        job_type = row[0].strip()
        steps = number(path, line, "total_steps", row[5], float, 1e-9)
        scale = count(path, line, "scale_factor", row[6], MAX_JOB_GPUS)
        weight = number(path, line, "priority_weight", row[7], float, 0.0)
        t = number(path, line, "arrival_time", row[9], float, 0.0)
        if tput is None:
            raise TraceError(f"{path}:{line}: a Gavel trace needs its throughputs: name Gavel's throughput "
                             "file in the cluster file (throughputs = \"FILE.json\", stint sim --cluster)")
        got = tput.of(job_type, scale)
        top = max(got.values(), default=0.0) if got else 0.0
        if not got or top <= 0:
            raise TraceError(f"{path}:{line}: job type {job_type!r} at scale factor {scale} has no "
                             f"throughput in {tput.source}")
        allowed = tuple(k for k, v in got.items() if v > 0) if min(got.values()) <= 0 else ()
        work = steps / top
        yield t, line, "", JobSpec(
            job_id=f"gavel-{line}", arrival_s=t, work=work, requested_workers=scale, min_workers=scale,
            max_workers=scale, application=application_of(job_type, scale), priority=weight or 1.0,
            duration_s=work, gpu_types=allowed)
