"""The mechanism cost model: how long each reconciler action keeps a job from making progress.

During an action's delay the job holds its new allocation but makes no progress (it is
checkpointing, moving state and restarting). Defaults follow Pollux's simulator, which charges
a fixed 30 s for every re-allocation; Singularity (Table 5) measures migrations and resizes of
tens of seconds, dominated by moving the checkpoint, so 30 s sits in its range. A first start
costs nothing by default so that a trace's recorded run times are reproduced; ``pollux()`` charges
it too, as Pollux does. A preemption itself frees the job's GPUs at once for the policy and
the ledger; ``stop_s`` is the time its checkpoint-and-stop takes before those GPUs are physically
free (live, a job given them launches after the stopped one exits): a job that starts on GPUs a
plan freed by a stop waits ``stop_s`` longer before it progresses (0 by default).

``fit`` gives the cost model of a live cluster from its attempts as the controller measured them
(``AttemptSample``; ``runtime/measured.py`` reads them from a store): a first start costs the
median launch-to-first-step time, a resume the median for attempts that carried on from an
earlier one, a stop the median checkpoint-and-stop time, a resize or migration a stop and a
resume. The 10th and 90th percentiles are kept beside the medians (the start estimates' band).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from stint.reconcile import ActionKind


@dataclass(frozen=True, slots=True)
class CostModel:
    start_s: float = 0.0
    resume_s: float = 30.0
    resize_s: float = 30.0
    migrate_s: float = 30.0
    stop_s: float = 0.0  # a stopped job's checkpoint-and-stop, before its GPUs are free

    def __post_init__(self) -> None:
        for name in ("start_s", "resume_s", "resize_s", "migrate_s", "stop_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"cost {name} must be >= 0 (got {getattr(self, name)})")

    def delay(self, kind: ActionKind) -> float:
        """Seconds without progress after ``kind`` (0 for preempt and reject)."""
        if kind is ActionKind.START:
            return self.start_s
        if kind is ActionKind.RESUME:
            return self.resume_s
        if kind is ActionKind.RESIZE:
            return self.resize_s
        if kind is ActionKind.MIGRATE:
            return self.migrate_s
        return 0.0

    @staticmethod
    def pollux() -> CostModel:
        """Every allocation change, the first start included, costs 30 s (Pollux's simulator)."""
        return CostModel(start_s=30.0, resume_s=30.0, resize_s=30.0, migrate_s=30.0)

    @staticmethod
    def free() -> CostModel:
        """Costless actions (for hand-computed schedules)."""
        return CostModel(0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class NamedCosts:
    """A cost model and the rule it came from (``summary.json`` states both)."""

    name: str  # "pollux" (Pollux-format traces), "default" (others), "given" (set by the
    # caller) or "measured" (fitted from a live store's attempts, ``stint sim --costs-from``)
    costs: CostModel

    def as_dict(self) -> dict[str, float | str]:
        return {"name": self.name, **asdict(self.costs)}


def for_format(fmt: str, restart_s: float | None = None) -> NamedCosts:
    """The cost model of a trace format, chosen by what the file is, not what it is called.

    Pollux-format traces get Pollux's model (every non-empty allocation, the first start
    included, costs 30 s); any other format the default (first start free). ``restart_s``
    replaces the cost of every resume, resize and migration, and of the first start where the
    format charges one, so ``--restart-s 30`` on a Pollux trace is Pollux's model unchanged.
    """
    name, base = ("pollux", CostModel.pollux()) if fmt == "pollux" else ("default", CostModel())
    if restart_s is None:
        return NamedCosts(name, base)
    start = restart_s if base.start_s > 0 else 0.0
    return NamedCosts(name, CostModel(start_s=start, resume_s=restart_s, resize_s=restart_s, migrate_s=restart_s))


@dataclass(frozen=True, slots=True)
class AttemptSample:
    """One live attempt's measured times, seconds (None: not measured, e.g. a job that reports
    no steps). ``launch_s``: launch to the first step of its own, less that step's own time;
    ``stop_s``: the request to checkpoint and stop to the exit; ``step_s``: seconds a step at
    ``workers`` (first report to end, over the steps in between)."""

    workers: int
    resumed: bool
    launch_s: float | None
    stop_s: float | None
    step_s: float | None


@dataclass(frozen=True, slots=True)
class FittedCosts:
    """The cost model fitted from a live cluster's attempts: medians (``costs``), 10th and 90th
    percentiles (``low``, ``high``), and how many attempts each figure rests on."""

    costs: CostModel
    low: CostModel
    high: CostModel
    samples: dict[str, int] = field(default_factory=dict)  # start, resume, stop -> attempts

    def as_dict(self) -> dict[str, object]:
        return {"name": "measured", **asdict(self.costs), "low": asdict(self.low),
                "high": asdict(self.high), "samples": dict(self.samples)}


def _quantiles(xs: list[float], default: float) -> tuple[float, float, float]:
    """(10th percentile, median, 90th percentile) of ``xs`` (all ``default`` if empty)."""
    if not xs:
        return default, default, default
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=10, method="inclusive")
    return max(0.0, q[0]), statistics.median(xs), max(0.0, q[-1])


def fit(samples: Sequence[AttemptSample], base: CostModel | None = None) -> FittedCosts:
    """The live cost model from measured attempts; a figure with no sample keeps ``base``'s
    (default: the free model). A resume with no sample costs what a first start does."""
    b = base or CostModel.free()
    starts = [a.launch_s for a in samples if a.launch_s is not None and not a.resumed]
    resumes = [a.launch_s for a in samples if a.launch_s is not None and a.resumed]
    stops = [a.stop_s for a in samples if a.stop_s is not None]
    start = _quantiles(starts, b.start_s)
    resume = _quantiles(resumes, b.resume_s) if resumes else (start if starts else _quantiles([], b.resume_s))
    stop = _quantiles(stops, b.stop_s)

    def model(i: int) -> CostModel:
        move = stop[i] + resume[i]
        return CostModel(start_s=start[i], resume_s=resume[i], resize_s=move, migrate_s=move,
                         stop_s=stop[i])

    return FittedCosts(model(1), model(0), model(2),
                       {"start": len(starts), "resume": len(resumes), "stop": len(stops)})
