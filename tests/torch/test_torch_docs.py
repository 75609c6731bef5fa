"""The SDK's guide: every file it names exists, every section it points to is there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "torch-sdk.md"


def headings(path: Path) -> list[str]:
    """A file's section titles: its Markdown headings and its bold run-in heads (``**Title.**``)."""
    text = path.read_text()
    return ([m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", text, re.MULTILINE)]
            + [m.group(1).strip() for m in re.finditer(r"\*\*([^*]+?)\.?\*\*", text)])


def resolves(title: str, path: Path) -> bool:
    return any(h == title or h.startswith(title) for h in headings(path))


def test_every_file_the_guide_names_exists():
    text = GUIDE.read_text()
    named = set(re.findall(r"\b((?:docs|benchmarks|examples|src|tests|papers|scripts)/[\w./-]*\w)", text))
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, missing


def test_every_section_the_guide_points_to_exists():
    text = GUIDE.read_text()
    below = re.findall(r'"([^"]+)" (?:below|above)', text)
    assert below  # the guide does point to its own sections
    for title in below:
        assert resolves(title, GUIDE), title
    aliases = {"README": ROOT / "README.md"}
    for where, title in re.findall(r'([\w./-]+) \("([^"]+)"\)', text):
        path = aliases.get(where, ROOT / where)
        assert path.exists(), where
        assert resolves(title, path), (where, title)
    for title in re.findall(r"\bsee ([a-z][\w -]+?)\)", text):  # "(... see accumulation)"
        assert resolves(title.capitalize(), GUIDE) or resolves(title, GUIDE), title
