"""The container tests run only when asked: ``scripts/container-test`` starts a Docker engine,
builds the image and runs them with ``SIDECAR_CONTAINER_TEST=1``. Anywhere else (the default
``pytest`` run, CI) they are skipped with that hint.

- ``SIDECAR_CONTAINER_IMAGE``: the image to run (required);
- ``DOCKER``: the docker CLI (default ``docker``; ``DOCKER_HOST`` is honoured as usual).
"""

from __future__ import annotations

import os
import shutil

import pytest

ENABLED = os.environ.get("SIDECAR_CONTAINER_TEST") == "1"
SKIP = pytest.mark.skip(reason="container test: run scripts/container-test "
                        "(or set SIDECAR_CONTAINER_TEST=1 and SIDECAR_CONTAINER_IMAGE)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(SKIP)


@pytest.fixture(scope="session")
def docker() -> str:
    cli = shutil.which(os.environ.get("DOCKER", "docker"))
    assert cli, "no docker CLI (set DOCKER)"
    return cli


@pytest.fixture(scope="session")
def image() -> str:
    tag = os.environ.get("SIDECAR_CONTAINER_IMAGE")
    assert tag, "SIDECAR_CONTAINER_IMAGE names the image to run (scripts/container-test builds it)"
    return tag
