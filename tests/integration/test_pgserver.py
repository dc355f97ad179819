"""The suite's own PostgreSQL plumbing: it finds a server, or starts one, or fails loudly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import pgserver

pytestmark = pytest.mark.postgres


def test_dsn_helpers() -> None:
    dsn = "postgresql://user:s3cret@db.example:5433/postgres?sslmode=disable"
    assert pgserver.with_database(dsn, "other") == (
        "postgresql://user:s3cret@db.example:5433/other?sslmode=disable"
    )
    assert "s3cret" not in pgserver.redact(dsn)
    with pytest.raises(pgserver.PgServerError):
        pgserver.with_database("host=localhost dbname=x", "other")


def test_an_explicit_dsn_that_does_not_answer_fails_instead_of_falling_back() -> None:
    closed = f"postgresql://postgres@127.0.0.1:{pgserver.free_port()}/postgres"
    with pytest.raises(pgserver.PgServerError, match="not reachable"):
        pgserver.find_or_start(env_dsn=closed)


def test_a_cluster_in_a_directory_the_postgres_user_cannot_reach(tmp_path: Path) -> None:
    # pytest's tmp_path is private to its owner; as root the server runs as `postgres`.
    cluster = pgserver.ThrowawayCluster(tmp_path / "pg", fsync=False)
    try:
        cluster.start()
        assert pgserver.run_sync(_answers(cluster.dsn))
    finally:
        cluster.cleanup()
    assert cluster.base_dir is None and not cluster.running()


async def _answers(dsn: str) -> bool:
    return await pgserver.probe(dsn, connect_timeout=2.0) is None


def test_without_a_server_it_starts_a_throwaway_cluster_that_survives_a_crash() -> None:
    closed = f"postgresql://postgres@127.0.0.1:{pgserver.free_port()}/postgres"
    server = pgserver.find_or_start(env_dsn="", default_dsn=closed)
    try:
        cluster = server.cluster
        assert cluster is not None, "nothing listened on the default DSN: it must start one"
        assert server.admin_dsn == cluster.dsn
        base = cluster.base_dir
        assert base is not None and (base / "data" / "PG_VERSION").is_file()
        assert pgserver.run_sync(_answers(cluster.dsn))

        cluster.stop(mode="immediate")
        assert not cluster.running()
        assert not pgserver.run_sync(_answers(cluster.dsn))

        cluster.start()  # same port and data directory: the DSN stays valid
        assert cluster.running()
        assert pgserver.run_sync(_answers(cluster.dsn))
    finally:
        server.close()
    assert not base.exists(), "cleanup removes the cluster's files"
    assert server.cluster is None


async def test_run_sync_also_works_inside_a_running_event_loop() -> None:
    # Session fixtures may be set up lazily from an async fixture (request.getfixturevalue).
    closed = f"postgresql://postgres@127.0.0.1:{pgserver.free_port()}/postgres"
    assert pgserver.run_sync(_answers(closed)) is False
