"""Every code reference in docs/*.md resolves: dotted names (``stint.x.y``: a module, or an
attribute of one; ``stint.X`` also as ``import stint.torch as stint`` names it), file paths
(from the repository's root, or the end of a path in it: ``executor/shim.py``), test ids
(``tests/f.py::test_x``, ``…::test_y`` for the same file), and the options of ``stint``
commands (``stint serve --tick``: one of ``stint serve``'s; a bare ```--flag``` one of some
command's or script's the repository has)."""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))

# The reader's own files in examples (a config to write, a script to run) and outputs of a run:
# no file of the repository is meant.
PLACEHOLDERS = {"serve.toml", "types.toml", "script.py", "ps_script.py", "train.py", "results/report.md"}
DATA_FILES = {"stint.db"}  # dotted, but the store's SQLite file, not a module

SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"(?<![\w./-])(stint(?:\.[A-Za-z_]\w*)+)(?![\w/-])")
FILE = re.compile(r"(?<![\w<>/.-])((?:[\w*-]+/)*[\w*-]+\.(?:py|md|toml|sh))(?:::(\w+))?(?![\w/])")
MORE_TESTS = re.compile(r"(?:…|\.\.\.)::(\w+)")


def lines(text: str) -> Iterator[list[str]]:
    """The doc's code, line by line: a fenced block's line whole, a prose line's inline spans."""
    for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.DOTALL):
        yield from ([line] for line in block.splitlines())
    for line in re.sub(r"```.*?```", "", text, flags=re.DOTALL).splitlines():
        yield SPAN.findall(line)


def spans(text: str) -> Iterator[str]:
    for line in lines(text):
        yield from line


def refs(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return [(doc.name, m) for doc in DOCS for s in spans(doc.read_text()) for m in pattern.findall(s)]


def resolves_dotted(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@cache
def repo_files() -> tuple[str, ...]:
    skip = {".git", ".venv", "__pycache__", "node_modules"}
    return tuple(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                 if p.is_file() and not skip & set(p.relative_to(ROOT).parts))


def find_file(path: str) -> str | None:
    """The repository file ``path`` names (from the root, or the end of a path; ``*`` globs)."""
    glob = re.compile("(^|/)" + re.escape(path).replace(r"\*", "[^/]*") + "$")
    return next((f for f in repo_files() if glob.search(f)), None)


def test_every_dotted_name_resolves() -> None:
    found = refs(DOTTED)
    assert len(found) > 20  # the check sees the references
    bad = [(doc, n) for doc, n in found if n not in DATA_FILES and not resolves_dotted(n)
           and not resolves_dotted("stint.torch." + n.removeprefix("stint."))]
    assert bad == []


def test_every_file_and_test_named_exists() -> None:
    bad = []
    seen = 0
    for doc in DOCS:
        for line in lines(doc.read_text()):
            last = None  # the file a "…::test_y" on the same line continues
            for s in line:
                for path, test in FILE.findall(s):
                    seen += 1
                    if path in PLACEHOLDERS:
                        continue
                    last = find_file(path)
                    if last is None:
                        bad.append((doc.name, path))
                    elif test and not defines(last, test):
                        bad.append((doc.name, f"{path}::{test}"))
                for test in MORE_TESTS.findall(s):
                    if last is None or not defines(last, test):
                        bad.append((doc.name, f"{last}::{test}"))
    assert seen > 100
    assert bad == []


def defines(path: str, name: str) -> bool:
    tree = ast.parse((ROOT / path).read_text())
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
               for n in ast.walk(tree))


@cache
def stint_options() -> dict[str, set[str]]:
    """Each ``stint`` command (``"serve"``, ``"token create"``; ``""`` the top) and its options."""
    import typer.main

    from stint.cli import app
    from stint.sim.cli import parser

    out: dict[str, set[str]] = {}

    def walk(cmd: Any, path: str) -> None:
        out[path] = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", ()))
                     if o.startswith("-")}
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    out["sim"] = {o for a in parser()._actions for o in a.option_strings}
    return out


def command_refs() -> Iterator[tuple[str, str, str, str]]:
    """(doc, command, option, snippet) for each option a ``stint ...`` snippet passes (before a
    ``--`` that starts the job's own command, or a ``#`` comment)."""
    commands = stint_options()
    for doc in DOCS:
        for s in spans(doc.read_text()):
            m = re.match(r"^\s*(?:\$\s*)?stint\s+(.*)$", s)
            if not m:
                continue
            words = m.group(1).split()
            path = ""
            for w in words:
                if f"{path} {w}".strip() not in commands:
                    break
                path = f"{path} {w}".strip()
            for w in words:
                if w in ("--", "#"):
                    break
                if w.startswith("--"):
                    yield doc.name, path, w.split("=")[0].rstrip(",.;:)"), s


def test_every_option_of_a_stint_command_exists() -> None:
    found = list(command_refs())
    assert len(found) > 20
    assert [(doc, f"stint {c} {o}") for doc, c, o, _ in found if o not in stint_options()[c]] == []


@cache
def script_options() -> set[str]:
    """Options the launcher, benchmarks and examples define, and those src/ passes to tools."""
    out: set[str] = set()
    for f in [*ROOT.glob("benchmarks/*.py"), *ROOT.glob("examples/*.py"), *ROOT.glob("src/stint/**/*.py")]:
        out |= set(re.findall(r"\"(--[a-z][\w-]*)\"", f.read_text()))
    return out


def test_every_bare_option_is_one_of_a_command_or_script() -> None:
    every = set().union(*stint_options().values()) | script_options()
    bare = [(doc.name, re.split(r"[ =\[/]", s)[0]) for doc in DOCS for s in SPAN.findall(doc.read_text())
            if re.match(r"^--[a-z]", s)]
    assert len(bare) > 20
    assert [(doc, o) for doc, o in bare if o not in every] == []


@pytest.mark.parametrize(("ref", "ok"), [("stint.torch.launch.main", True), ("stint.init", True),
                                         ("stint.torch.nope", False)])
def test_the_dotted_check_tells_a_name_that_does_not_resolve(ref: str, ok: bool) -> None:
    assert (resolves_dotted(ref) or resolves_dotted("stint.torch." + ref.removeprefix("stint."))) == ok


def test_the_file_check_tells_a_path_that_does_not_exist() -> None:
    assert find_file("executor/shim.py") == "src/stint/runtime/executor/shim.py"
    assert find_file("policies/oasis*.py") is not None
    assert find_file("hell.py") is None  # (not the end of a name: shell.py does not count)
    assert find_file("executor/nope.py") is None


def headings(path: Path) -> list[str]:
    """A file's section titles: its Markdown headings and its bold run-in heads (``**Title.**``)."""
    text = path.read_text()
    return ([m.strip() for m in re.findall(r"^#+\s+(.+)$", text, re.MULTILINE)]
            + [m.strip() for m in re.findall(r"\*\*([^*]+?)\.?\*\*", text)])


def has_section(path: Path, title: str) -> bool:
    title = " ".join(title.split())  # (a title may wrap across lines)
    return any(h == title or h.startswith(title) for h in headings(path))


def test_every_section_pointed_to_exists() -> None:
    bad, seen = [], 0
    for doc in DOCS:
        text = doc.read_text()
        for title in re.findall(r'"([^"]+)" (?:below|above)', text):
            seen += 1
            if not has_section(doc, title):
                bad.append((doc.name, title))
        for where, title in re.findall(r'([A-Za-z_./-]+\.md),? \(?"([^"]+)"', text):
            seen += 1
            found = find_file(where)
            if found is None or not has_section(ROOT / found, title):
                bad.append((doc.name, f"{where} {title!r}"))
    assert seen > 10
    assert bad == []
