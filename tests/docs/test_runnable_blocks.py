"""The shell blocks the docs mark as runnable (`<!-- run -->`, see tests/docs/blocks.py) run, in
page order, as a reader would type them: README's quick start, the quick start page and
install.md's from-source commands in one copy of the checkout (their virtualenv is created and
installed by the pages' own commands), docs/local-development.md with the `webhook-sidecar`
under test. Loopback only; each page bounded in time."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.docs import blocks
from tests.support import REPO

INSTALLING = [REPO / "README.md", REPO / "docs" / "quickstart.md", REPO / "docs" / "install.md"]
LOCAL_DEVELOPMENT = REPO / "docs" / "local-development.md"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return blocks.checkout_copy(REPO, tmp_path_factory.mktemp("checkout"))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", INSTALLING, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_install_and_demo_blocks_run(page: Path, checkout: Path) -> None:
    found = blocks.blocks(page)
    assert found, f"{page.name} marks no block to run"
    done = blocks.run(found, checkout, timeout=540)
    assert done.returncode == 0, done.stdout[-4000:]
    if any("webhook-sidecar demo" in block.body for block in found):
        assert "demo OK" in done.stdout, done.stdout[-4000:]


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_local_development_blocks_run(tmp_path: Path) -> None:
    found = blocks.blocks(LOCAL_DEVELOPMENT)
    assert [b.file for b in found if b.file] == ["config.local.yaml"]
    assert any(b.serve for b in found), "the page's proxy start is not checked"
    # The page's proxy listens on 8080 and the admin default 9090, as on a laptop: in a network
    # namespace of its own where the machine allows one, else on the machine's loopback.
    isolated = blocks.private_network()
    if not isolated:
        busy = [port for port in (8080, 9090) if not _free(port)]
        assert not busy, f"ports {busy} are taken here: the page's proxy cannot start"
    # The page must export every secret its config reads before checking or starting it.
    done = blocks.run(found, tmp_path, timeout=90, isolated=isolated, unset=(
        "WEBHOOK_SIDECAR_SIGNING_SECRET", "STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET"))
    assert done.returncode == 0, done.stdout[-4000:]
    assert "listening" in done.stdout, done.stdout[-4000:]


def test_the_marks_are_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- file: a.yaml -->\n```yaml\nx: 1\n```\n\n```sh\nskipped\n```\n"
                    "<!-- run -->\n```sh\nexport A=1 \\\n  B=2\n```\n"
                    "<!-- run: serve http://127.0.0.1:1/healthz -->\n```sh\nserver --x\n```\n")
    found = blocks.blocks(page)
    assert [(b.file, b.serve) for b in found] == [
        ("a.yaml", None), (None, None), (None, "http://127.0.0.1:1/healthz")]
    script = blocks.script(found)
    assert "skipped" not in script and "export A=1 B=2" in script
    assert "server --x &" in script and "kill -TERM $server" in script


def test_a_failing_block_fails_the_run(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- run -->\n```sh\ntrue\nfalse\necho not reached\n```\n")
    done = blocks.run(blocks.blocks(page), tmp_path, timeout=30)
    assert done.returncode != 0 and "not reached" not in done.stdout
