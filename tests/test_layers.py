"""The layering the design rests on: the model, perf, placement, policy and reconcile layers
import nothing of the simulator, the live runtime, the SDK, or a clock. (Policy decides, the one
mechanism enacts, and only the mechanism knows what time it is.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "stint"
PURE = ["model", "perf", "placement", "policies", "reconcile.py"]
FORBIDDEN = ("stint.sim", "stint.runtime", "stint.torch", "stint.experiments", "time",
             "datetime")


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def _files(part: str) -> list[Path]:
    p = SRC / part
    return [p] if p.is_file() else sorted(p.rglob("*.py"))


@pytest.mark.parametrize("part", PURE)
def test_pure_layers_import_no_mechanism_and_no_clock(part: str) -> None:
    bad = [(f.relative_to(SRC), name) for f in _files(part) for name in _imports(f)
           if any(name == x or name.startswith(x + ".") for x in FORBIDDEN)]
    assert bad == []


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import time\nfrom stint.sim.engine import Simulator\n")
    assert _imports(f) == ["time", "stint.sim.engine"]
