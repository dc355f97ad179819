"""Fixtures for the integration tests that pause, crash or kill a server: ``cluster``, one
private PostgreSQL cluster per test module (fsync on), never the shared server. Each module
gets its fresh databases on it with ``tests.pgserver.migrated_database``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pgserver import ThrowawayCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayCluster]:
    own = ThrowawayCluster()  # fsync on: a test crashes it
    try:
        own.start()  # a PgServerError here fails (never skips) every test of the module
        yield own
    finally:
        own.cleanup()
