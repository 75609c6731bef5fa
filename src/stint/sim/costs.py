"""The mechanism cost model: how long each reconciler action keeps a job from making progress.

During an action's delay the job holds its new allocation but makes no progress (it is
checkpointing, moving state and restarting). Defaults follow Pollux's simulator, which charges
a fixed 30 s for every re-allocation; Singularity (Table 5) measures migrations and resizes of
tens of seconds, dominated by moving the checkpoint, so 30 s sits in its range. A first start
costs nothing by default so that a trace's recorded run times are reproduced; ``pollux()`` charges
it too, as Pollux does. A preemption itself is instantaneous here: the checkpoint is taken at the
next step boundary and its cost is folded into the resume.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from stint.reconcile import ActionKind


@dataclass(frozen=True, slots=True)
class CostModel:
    start_s: float = 0.0
    resume_s: float = 30.0
    resize_s: float = 30.0
    migrate_s: float = 30.0

    def __post_init__(self) -> None:
        for name in ("start_s", "resume_s", "resize_s", "migrate_s"):
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
        return CostModel(0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class NamedCosts:
    """A cost model and the rule it came from (``summary.json`` states both)."""

    name: str  # "pollux" (Pollux-format traces), "default" (others) or "given" (set by the caller)
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
