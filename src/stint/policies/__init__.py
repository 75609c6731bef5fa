"""Scheduling policies: one module per policy, each registering itself by name.

To add one: write ``policies/<name>.py`` with a class decorated ``@register("<name>")`` and import
the module below.
"""

from stint.policies.base import ClusterView, JobStatus, PerfModel, Phase, Policy
from stint.policies.registry import available, make, register

__all__ = ["ClusterView", "JobStatus", "PerfModel", "Phase", "Policy", "available", "make", "register"]

# Policy modules register themselves on import. Keep this list sorted.
import importlib as _importlib
import pkgutil as _pkgutil

for _m in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if _m not in ("base", "registry") and not _m.startswith("_"):
        _importlib.import_module(f"{__name__}.{_m}")
