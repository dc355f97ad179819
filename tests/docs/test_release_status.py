"""Nothing is released until a version is tagged, and the docs say so wherever they would
otherwise send a reader to something that does not exist yet:

- every dated `## [X.Y.Z] - date` heading in CHANGELOG.md has its git tag `vX.Y.Z` (a heading
  dated before its tag would make `scripts/release-notes` publish notes for other code);
- no page or source string offers `pip install webhook-sidecar…` (or pipx) without marking, in
  the same paragraph, that the PyPI package is not released yet."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

DATED = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}", re.M)
PYPI_INSTALL = re.compile(r"\bpipx? install (?:-\S+ )*['\"]?webhook-sidecar\b")
MARKED = re.compile(r"once released|not (?:yet )?released|not yet", re.I)


def tags() -> set[str]:
    done = subprocess.run(["git", "-C", str(REPO), "tag", "--list"], capture_output=True,
                          text=True, timeout=30, check=True)
    return set(done.stdout.split())


def test_every_dated_changelog_version_is_tagged() -> None:
    dated = DATED.findall((REPO / "CHANGELOG.md").read_text(encoding="utf-8"))
    untagged = [f"v{version}" for version in dated if f"v{version}" not in tags()]
    assert untagged == [], (
        f"CHANGELOG.md dates {untagged} but git has no such tag: keep the changes under "
        "[Unreleased] until the tag is made (docs/releasing.md)")


def test_the_changelog_check_sees_a_dated_heading() -> None:
    assert DATED.findall("# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-11-30\n") == [
        "0.1.0"]


def _sources() -> list[Path]:
    files = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "config.example.yaml",
             *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "sidecar").rglob("*.py")),
             *sorted((REPO / "helm").rglob("*.md")), *sorted((REPO / "helm").rglob("*.txt")),
             *sorted((REPO / "helm").rglob("values.yaml"))]
    return [f for f in files if "/charts/" not in f.as_posix()]


def unmarked_pypi_installs(text: str) -> list[str]:
    """The paragraphs (blank-line separated) offering a PyPI install without saying it is not
    released yet."""
    return [paragraph.strip() for paragraph in re.split(r"\n[ \t]*\n", text)
            if PYPI_INSTALL.search(paragraph) and not MARKED.search(paragraph)]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_pypi_install_offered_as_if_released(path: Path) -> None:
    assert unmarked_pypi_installs(path.read_text(encoding="utf-8")) == []


def test_the_install_check_tells_marked_from_unmarked() -> None:
    assert unmarked_pypi_installs("Install: `pip install 'webhook-sidecar[otel]'`.\n")
    assert not unmarked_pypi_installs("Once released (not yet): `pipx install webhook-sidecar`")
    assert not unmarked_pypi_installs("`pip install '.[otel]'` in a checkout\n")
