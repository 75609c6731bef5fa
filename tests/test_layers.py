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


# Each layer may import its own modules and those of layers below it (a lower rank), never one
# beside or above it. The SDK (``torch``) stands apart: it imports nothing of the scheduler. The
# commands (``stint/cli.py`` and each folder's ``cli.py``) sit on top.
RANKS = {"stint": 0, "ray_env": 0, "ports": 0, "model": 1, "torch": 1, "perf": 2, "placement": 3,
         "policies": 4, "config": 5, "reconcile": 5, "mechanism": 6, "report": 6, "sim": 7,
         "experiments": 8, "runtime": 8, "cli": 9}


def _module(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph(src: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package at ``src`` it imports (at the top or in functions)."""
    files = {_module(f, src): f for f in src.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, f in files.items():
        deps: set[str | None] = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                deps |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps |= {known(f"{node.module}.{a.name}") or known(node.module) for a in node.names}
        graph[mod] = {d for d in deps if d is not None and d != mod}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = [stack.pop()]
            while comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(mod: str) -> str:
    """A module's layer: its folder; the command-line modules (``cli``, ``*_cli``) of every
    folder are the top layer, ``cli`` (a command may use any layer below it)."""
    parts = mod.split(".")
    if parts[-1] == "cli" or parts[-1].endswith("_cli"):
        return "cli"
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert _cycles(_graph(SRC)) == []


def test_no_layer_imports_one_beside_or_above_it() -> None:
    assert set(RANKS) >= {_layer(m) for m in _graph(SRC)}, "a new layer needs a rank"
    upward = sorted((m, d) for m, deps in _graph(SRC).items() for d in deps
                    if _layer(m) != _layer(d) and RANKS[_layer(d)] >= RANKS[_layer(m)])
    assert upward == []


def test_the_checks_see_a_cycle_and_a_function_local_import(tmp_path: Path) -> None:
    pkg = tmp_path / "stint"
    (pkg / "sim").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sim" / "__init__.py").write_text("")
    (pkg / "sim" / "a.py").write_text("from stint.sim.b import f\n")
    (pkg / "sim" / "b.py").write_text("def f():\n    from stint.sim import a\n")
    graph = _graph(pkg)
    assert graph["stint.sim.b"] == {"stint.sim.a"}
    assert _cycles(graph) == [["stint.sim.a", "stint.sim.b"]]
