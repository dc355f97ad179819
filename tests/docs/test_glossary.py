"""docs/design.md's glossary points at real code: every module, folder or SQL file in its
"where it lives" column exists, and every name given after a module is defined there. Renaming
a class or moving a module without fixing the glossary fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import REPO

DESIGN = REPO / "docs" / "design.md"
SIDECAR = REPO / "sidecar"
SQL = SIDECAR / "store" / "sql" / "postgres"
SPAN = re.compile(r"`([^`]+)`")


def glossary_rows(text: str) -> list[tuple[str, str]]:
    """(word, where-it-lives cell) for each row of the table under "## Glossary"."""
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("**"):
            rows.append((cells[0], cells[2]))
    return rows


def references(cell: str) -> list[tuple[str, str | None]]:
    """(path, name defined in it or None) for each code span naming a file or a folder."""
    found: list[tuple[str, str | None]] = []
    spans = SPAN.findall(cell)
    for i, span in enumerate(spans):
        if not re.fullmatch(r"[\w/]+(\.py|\.sql|/)", span):
            continue
        following = spans[i + 1] if i + 1 < len(spans) else None
        name = following if (span.endswith(".py") and following
                             and re.fullmatch(r"[A-Z]\w+", following)) else None
        found.append((span, name))
    return found


def _resolve(path: str) -> Path:
    return SQL / path if path.endswith(".sql") else SIDECAR / path


def _defines(module: Path, name: str) -> bool:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


ROWS = glossary_rows(DESIGN.read_text(encoding="utf-8"))


def test_the_glossary_has_the_domains_words() -> None:
    words = {word.strip("*").split("**")[0] for word, _ in ROWS}
    for needed in ("delivery", "event", "attempt", "claim", "lease", "take-over", "record",
                   "replay", "queue entry", "worker", "upkeep"):
        assert any(needed in word for word in words), needed


@pytest.mark.parametrize(("word", "cell"), ROWS, ids=[w.strip("*") for w, _ in ROWS])
def test_each_place_named_exists(word: str, cell: str) -> None:
    for path, name in references(cell):
        target = _resolve(path)
        assert target.exists(), f"{word}: {path} not found"
        if name is not None:
            assert _defines(target, name), f"{word}: {name} is not defined in {path}"


def test_the_check_sees_a_wrong_name() -> None:
    cell = "`core/decision.py` `NoSuchDecision`"
    [(path, name)] = references(cell)
    assert name == "NoSuchDecision"
    assert not _defines(_resolve(path), name)
