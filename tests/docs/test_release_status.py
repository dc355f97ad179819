"""Nothing is released until a version is tagged, and the docs say so wherever they would
otherwise send a reader to something that does not exist yet:

- every dated `## [X.Y.Z] - date` heading in CHANGELOG.md has its git tag `vX.Y.Z` (a heading
  dated before its tag would make `scripts/release-notes` publish notes for other code), except
  the release being cut (docs/releasing.md): the version pyproject.toml declares, dated within
  the last two days, whose tag follows the merge;
- no page or source string offers `pip install webhook-sidecar…` (or pipx) without marking, in
  the same paragraph, that the PyPI package is not released yet."""

from __future__ import annotations

import datetime
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support import REPO

DATED = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})", re.M)
BEING_CUT = datetime.timedelta(days=2)
PYPI_INSTALL = re.compile(r"\bpipx? install (?:-\S+ )*['\"]?webhook-sidecar\b")
MARKED = re.compile(r"once released|not (?:yet )?released|not yet", re.I)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def untagged(changelog: str, tags: set[str], declared: str, today: datetime.date) -> list[str]:
    """The dated versions of ``changelog`` without a tag, but for the release being cut."""
    found = []
    for version, date in DATED.findall(changelog):
        being_cut = (version == declared
                     and today - datetime.date.fromisoformat(date) <= BEING_CUT)
        if f"v{version}" not in tags and not being_cut:
            found.append(f"v{version} ({date})")
    return found


def test_every_dated_changelog_version_is_tagged() -> None:
    tags = set(git("tag", "--list").split())
    if not tags and git("rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.skip("a shallow clone without tags (CI's default checkout) cannot tell")
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    today = datetime.datetime.now(datetime.UTC).date()
    missing = untagged((REPO / "CHANGELOG.md").read_text(encoding="utf-8"), tags, declared, today)
    assert missing == [], (
        f"CHANGELOG.md dates {missing} but git has no such tag: keep the changes under "
        "[Unreleased] until the release is cut (docs/releasing.md)")


def test_the_changelog_check_sees_dated_headings() -> None:
    changelog = "## [Unreleased]\n\n## [0.2.0] - 2026-12-02\n\n## [0.1.0] - 2026-11-30\n"
    today = datetime.date(2026, 12, 3)
    assert untagged(changelog, set(), "0.2.0", today) == ["v0.1.0 (2026-11-30)"]
    assert untagged(changelog, {"v0.1.0"}, "0.2.0", today) == []
    assert untagged(changelog, {"v0.1.0"}, "0.3.0", today) == ["v0.2.0 (2026-12-02)"]
    assert untagged(changelog, {"v0.1.0"}, "0.2.0", datetime.date(2026, 12, 9)) == [
        "v0.2.0 (2026-12-02)"]


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
