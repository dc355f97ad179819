"""CHANGELOG.md keeps the form of Keep a Changelog 1.1.0: each release section (`## [...]`) has
only the change-type headings `### Added`, `### Changed`, `### Deprecated`, `### Removed`,
`### Fixed`, `### Security`, each at most once and in that order. Topics within a type are
`#### ` headings; a `### ` heading named for something else (a theme, a piece of work) fails."""

from __future__ import annotations

import pytest

from tests.support import REPO

CHANGELOG = REPO / "CHANGELOG.md"
TYPES = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def release_sections(text: str) -> dict[str, list[str]]:
    """The `### ` headings (without the hashes) of each `## ` section, by its heading line."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line, [])
        elif line.startswith("### ") and current is not None:
            current.append(line[4:].strip())
    return sections


def problems(headings: list[str]) -> list[str]:
    """What is wrong with one section's `### ` headings: unknown, repeated or out of order."""
    found = []
    last = -1
    for heading in headings:
        if heading not in TYPES:
            found.append(f"not a change type: {heading!r}")
            continue
        rank = TYPES.index(heading)
        if headings.count(heading) > 1 and rank <= last:
            found.append(f"repeated: {heading!r}")
        elif rank < last:
            found.append(f"out of order: {heading!r} after {TYPES[last]!r}")
        last = max(last, rank)
    return found


def test_there_is_a_release_section() -> None:
    assert "## [Unreleased]" in release_sections(CHANGELOG.read_text(encoding="utf-8"))


@pytest.mark.parametrize("section", list(release_sections(CHANGELOG.read_text(encoding="utf-8"))))
def test_section_has_only_keep_a_changelog_types_in_order(section: str) -> None:
    headings = release_sections(CHANGELOG.read_text(encoding="utf-8"))[section]
    assert headings, f"{section}: no change-type heading"
    assert problems(headings) == []


def test_the_check_finds_them() -> None:
    assert problems(["Added", "Changed", "Fixed", "Security"]) == []
    assert problems(["Added (speed)"]) == ["not a change type: 'Added (speed)'"]
    assert problems(["Added", "Fixed", "Added"]) == ["repeated: 'Added'"]
    assert problems(["Fixed", "Changed"]) == ["out of order: 'Changed' after 'Fixed'"]
    assert problems(["Security and fixes"]) == ["not a change type: 'Security and fixes'"]
    text = "# Changelog\n\n## [Unreleased]\n\n### Added\n#### Speed\n- x\n\n## [0.1.0]\n### Fixed\n"
    assert release_sections(text) == {"## [Unreleased]": ["Added"], "## [0.1.0]": ["Fixed"]}
