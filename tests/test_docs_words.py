"""The product's documents speak to its users: no pointers to files users do not have, and no
words about how the product was made (issue numbers, who measured, which sitting)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "src" / "stint" / "data" / "PROVENANCE.md"]
FORBIDDEN = {
    "a link to the project's reference papers": re.compile(r"papers/"),
    "a path outside the repository": re.compile(r"\.\./shared|\bshared/(traces|papers)"),
    "an issue number": re.compile(r"\bissues?\s*#?\d+|#\d{2,}\b(?![0-9a-f])"),
    "who measured or when in the work": re.compile(r"\b(sitting|the lead|helper sessions?|"
                                                   r"this session|earlier session)\b", re.IGNORECASE),
}


def offences(text: str) -> list[str]:
    return [f"line {n}: {what}" for n, line in enumerate(text.splitlines(), 1)
            for what, pattern in FORBIDDEN.items() if pattern.search(line)]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_document_holds_no_pointer_outside_and_no_word_of_its_making(path: Path) -> None:
    assert offences(path.read_text()) == []


def test_the_check_sees_each_kind() -> None:
    text = ("see ../shared/papers/oasis.md\nfixed in issue 12\nthe lead runs it\n"
            "Kueue's open asks #13159\nplain text")
    assert offences(text) == [
        "line 1: a link to the project's reference papers", "line 1: a path outside the repository",
        "line 2: an issue number", "line 3: who measured or when in the work", "line 4: an issue number"]
