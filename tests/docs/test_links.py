"""The README stays a first screen, and the documentation's relative links lead somewhere: every
link and image in README.md and docs/*.md that is not a URL names a file or folder of the
repository, and its #anchor (within a Markdown file) a heading of that file, slugged as GitHub
does. Moving a section or renaming a heading without fixing the links into it fails here."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 200

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _prose(text: str) -> str:
    """The text a reader sees as Markdown: fenced blocks and code spans hold no links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page: one per heading (repeats numbered -1, -2, …)."""
    text = page.read_text(encoding="utf-8")
    found: set[str] = set(HTML_ANCHOR.findall(text))
    seen: Counter[str] = Counter()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = _slug(heading)
        found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def relative_links(page: Path) -> list[str]:
    return [target for target in LINK.findall(_prose(page.read_text(encoding="utf-8")))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto:


def test_the_slug_matches_github_s() -> None:
    assert _slug("Forwarding headers: `trusted_proxies`") == "forwarding-headers-trusted_proxies"
    assert _slug("Speed against the floors, in one command (`bench/wrk/`)") == (
        "speed-against-the-floors-in-one-command-benchwrk")
    assert _slug("Native sidecar (Kubernetes ≥ 1.29)") == "native-sidecar-kubernetes--129"


def test_the_readme_is_a_first_screen_not_the_reference() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, (
        f"README.md has {lines} lines: move reference material into docs/ and link to it")


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and unquote(anchor) not in anchors(destination):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == [], f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_check_finds_links_at_all() -> None:
    targets = relative_links(README)
    assert "docs/behaviour.md" in targets
    assert "docs/operations.md#tracing" in targets
    assert "docs/images/inspector-event.png" in targets
