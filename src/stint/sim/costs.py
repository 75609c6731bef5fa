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

from dataclasses import dataclass

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
