"""What a policy may know of a job's length: what its user declared, or what was learned online.

A real scheduler never knows how long a job will run. A policy reads a job's length only through
``JobStatus.known_work`` / ``known_remaining_at`` (``policies/base.py``), which the mechanism fills
once, when it builds the job's status (``JobStatus.est_work``), from a ``Knowledge``:

- ``declared`` (the default): the run time the user declared at the requested size
  (``JobSpec.est_s``: a trace's ``est_s`` column, ``stint submit --est-s``); for a job that
  declares none, the *user history* estimate: the median run time (at the requested size) of the
  last ``HISTORY`` jobs of the same user on the same number of GPUs that finished before it
  arrived, else of the same user's jobs (at least ``MIN_SAMPLES`` of them), else of every user's,
  else ``DEFAULT_S``;
- ``oracle``: the job's true work (studies and upper-bound baselines only).

A job that runs past its estimate is expected to run as long again: its known total doubles
(``known_total``) each time its work done passes it, so a remaining estimate is 0 only at the
instant the work done equals it. Pure: no I/O, no clock; the simulator and the live control plane share it.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from stint.model.job import JobSpec

HISTORY = 50  # past jobs per (user, GPUs) and per user that the estimate is the median of
GLOBAL_HISTORY = 200  # past jobs of every user (the fallback)
MIN_SAMPLES = 3  # a (user, GPUs) or user history shorter than this is not used
DEFAULT_S = 3600.0  # the estimate before any job has finished


class Mode(StrEnum):
    """Where a job's length comes from (``stint sim --knowledge``, ``summary.json``'s ``knowledge``)."""

    DECLARED = "declared"
    ORACLE = "oracle"


class Source(StrEnum):
    """Where one job's estimate came from (counted in ``summary.json``)."""

    DECLARED = "declared"
    USER_GPUS = "user-gpus-history"
    USER = "user-history"
    ALL = "all-users-history"
    DEFAULT = "default"
    ORACLE = "oracle"


ESTIMATOR = (f"declared est_s, else the median run time at the requested size of the last {HISTORY} "
             f"finished jobs of the same user and GPU count (at least {MIN_SAMPLES}), else of the same "
             f"user, else of every user (last {GLOBAL_HISTORY}), else {DEFAULT_S:g} s; a job past its "
             "estimate is expected to run as long again (the estimate doubles each time the work done passes it)")


def known_total(est_work: float, done: float) -> float:
    """The total work a job is believed to have, given its estimate and the work it has done:
    the estimate, doubled as many times as needed to reach ``done``."""
    total = max(est_work, 1e-12)
    while total < done:
        total *= 2.0
    return total


@dataclass
class Knowledge:
    """Per run: the mode, and the user history it learns from finished jobs (``observe``)."""

    mode: Mode = Mode.DECLARED
    _by_user_gpus: dict[tuple[str, int], deque[float]] = field(default_factory=dict)
    _by_user: dict[str, deque[float]] = field(default_factory=dict)
    _all: deque[float] = field(default_factory=lambda: deque(maxlen=GLOBAL_HISTORY))

    def estimate_s(self, spec: JobSpec) -> tuple[float | None, Source]:
        """The job's run time at its requested size as this knowledge has it, in seconds (None
        in oracle mode: the caller uses the true work), and where it came from."""
        if self.mode is Mode.ORACLE:
            return None, Source.ORACLE
        if spec.est_s is not None:
            return spec.est_s, Source.DECLARED
        gpus = spec.requested_workers * spec.gpus_per_worker
        own = self._by_user_gpus.get((spec.user, gpus))
        if own is not None and len(own) >= MIN_SAMPLES:
            return statistics.median(own), Source.USER_GPUS
        user = self._by_user.get(spec.user)
        if user is not None and len(user) >= MIN_SAMPLES:
            return statistics.median(user), Source.USER
        if self._all:
            return statistics.median(self._all), Source.ALL
        return DEFAULT_S, Source.DEFAULT

    def observe(self, spec: JobSpec, run_s: float) -> None:
        """A job finished after ``run_s`` seconds of running at its requested size."""
        gpus = spec.requested_workers * spec.gpus_per_worker
        self._by_user_gpus.setdefault((spec.user, gpus), deque(maxlen=HISTORY)).append(run_s)
        self._by_user.setdefault(spec.user, deque(maxlen=HISTORY)).append(run_s)
        self._all.append(run_s)
