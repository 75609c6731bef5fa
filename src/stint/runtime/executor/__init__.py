"""Executors: start, signal, stop and observe real worker processes (see ``base`` for the contract).

``local.LocalExecutor`` runs workers as processes on this machine; ``ray.RayExecutor`` places them on
a Ray cluster. Import those modules directly (``ray`` is heavy); this package only re-exports the
interface.
"""

from stint.runtime.executor.base import (
    DEFAULT_GRACE_S,
    EXIT_CHECKPOINTED,
    Executor,
    ExecutorError,
    JobExit,
    NodeInfo,
    Outcome,
    WorkerLaunch,
)

__all__ = [
    "DEFAULT_GRACE_S",
    "EXIT_CHECKPOINTED",
    "Executor",
    "ExecutorError",
    "JobExit",
    "NodeInfo",
    "Outcome",
    "WorkerLaunch",
]
