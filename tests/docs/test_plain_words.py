"""The user-facing pages speak to users: no names of internal work items ("issue 12",
"p22-lone"), no "this session", no notes about who else was using the machine. git keeps that
history; README.md, docs/ and CHANGELOG.md say what is true now and how to reproduce it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO

INTERNAL = re.compile(r"this session|helpers'|helper's|\bissue [0-9]+\b|\bp[0-9]{2}-[a-z]+",
                      re.I)
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def internal_words(text: str) -> list[str]:
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if INTERNAL.search(line)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_internal_work_names(page: Path) -> None:
    assert internal_words(page.read_text(encoding="utf-8")) == []


def test_the_check_finds_them() -> None:
    found = internal_words("ok\nAfter issue 22, on branch p22-lone.\nThis session's path\nfine")
    assert [line.split(":")[0] for line in found] == ["2", "3"]
