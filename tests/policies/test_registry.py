"""The registry imports built-in policies on demand and its name table matches the modules."""

import importlib
import pkgutil
import subprocess
import sys

import stint.policies
from stint.policies import registry


def test_builtin_table_names_what_the_modules_register():
    modules = [m.name for m in pkgutil.iter_modules(stint.policies.__path__)]
    for m in modules:
        if m not in ("base", "registry") and not m.startswith("_"):
            importlib.import_module(f"stint.policies.{m}")
    assert set(registry._REGISTRY) == set(registry.BUILTIN)
    for name, module in registry.BUILTIN.items():
        assert registry._REGISTRY[name].__module__ == f"stint.policies.{module}", name


def test_a_run_without_optimus_or_dorm_never_imports_scipy():
    code = (
        "import sys\n"
        "from stint.sim.runner import SimConfig, run_all\n"
        "from stint.sim.traces import Filters\n"
        "from stint.policies import available\n"
        "run_all(SimConfig(trace='philly', policies=('fifo', 'tiresias'), filters=Filters(limit=50)))\n"
        "assert 'optimus' in available()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy')[:3])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
