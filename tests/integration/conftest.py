"""Fixtures for the integration tests that pause, crash or kill a server: ``cluster``, one
private PostgreSQL cluster per test module (fsync on), never the shared server. Each module
gets its fresh databases on it with ``tests.pgserver.migrated_database``. ``eater``: a relay
before it that loses the answer of one armed statement."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.pgserver import ThrowawayCluster
from tests.replyeater import ReplyEater


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayCluster]:
    own = ThrowawayCluster()  # fsync on: a test crashes it
    try:
        own.start()  # a PgServerError here fails (never skips) every test of the module
        yield own
    finally:
        own.cleanup()


@pytest.fixture
async def eater(cluster: ThrowawayCluster) -> AsyncIterator[ReplyEater]:
    """A relay before the module's cluster that loses one answer after its commit, when armed
    (``tests/replyeater.py``)."""
    async with ReplyEater(cluster.port) as relay:
        yield relay
