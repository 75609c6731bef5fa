"""Scheduling policies: one module per policy, each registering itself by name.

To add one: write ``policies/<name>.py`` with a class decorated ``@register("<name>")`` and add
the name to ``registry.BUILTIN``; ``make(name)`` imports the module on first use.
"""

from stint.perf.model import PerfModel
from stint.policies.base import ClusterView, JobStatus, Phase, Policy
from stint.policies.registry import available, make, register

__all__ = ["ClusterView", "JobStatus", "PerfModel", "Phase", "Policy", "available", "make", "register"]
