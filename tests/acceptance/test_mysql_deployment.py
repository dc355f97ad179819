"""The proxy on MySQL / MariaDB as an operator runs it: ``webhook-sidecar migrate`` then two
``run`` processes sharing one database (``store.url: mysql://…``). Identical deliveries fired
at both at once reach the app exactly once; a redelivery is answered from the row; and a
process on a database that was never migrated refuses to start, naming the command."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.acceptance.conftest import run_cli
from tests.mariadbserver import (
    MariaDBServer,
    create_database,
    drop_database,
    unique_database_name,
)
from tests.support import (
    ProxyProcess,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

pytestmark = pytest.mark.mariadb


@pytest.fixture
async def database(mariadb_server: MariaDBServer) -> AsyncIterator[str]:
    name = unique_database_name("sidecar_acc")
    dsn = await create_database(mariadb_server.admin_dsn, name)
    try:
        yield dsn
    finally:
        await drop_database(mariadb_server.admin_dsn, name)


async def test_two_processes_on_one_mariadb_forward_each_event_once(
        database: str, tmp_path: Path) -> None:
    stub = await StubApp().start()
    procs: list[ProxyProcess] = []
    try:
        config = write_config(tmp_path, base_config(stub.url, database))
        code, out, err = await run_cli("migrate", "--config", str(config))
        assert code == 0, err
        assert "applied: 0001_init" in out
        code, out, err = await run_cli("migrate", "--config", str(config))
        assert (code, out.strip()) == (0, "database schema is up to date"), err

        procs = list(await asyncio.gather(ProxyProcess(config).start(),
                                          ProxyProcess(config).start()))
        body = stripe_event("evt_mysql_1")
        async with aiohttp.ClientSession() as client:
            answers = await asyncio.gather(*(
                post(client, procs[i % 2].url + "/webhooks/stripe", body, stripe_headers(body))
                for i in range(20)))
            assert stub.count("evt_mysql_1") == 1, "exactly one delivery reached the app"
            assert all(status in (200, 409) for status, _, _ in answers), answers
            assert any(status == 200 for status, _, _ in answers)
            # A redelivery once the first is recorded: replayed from the row.
            status, _, _ = await post(client, procs[1].url + "/webhooks/stripe", body,
                                      stripe_headers(body))
            assert status == 200
            assert stub.count("evt_mysql_1") == 1
            async with client.get(procs[0].admin_url + "/readyz") as ready:
                assert ready.status == 200
    finally:
        for proc in procs:
            await proc.terminate()
        await stub.stop()


async def test_a_process_on_an_unmigrated_database_refuses_to_start(
        database: str, tmp_path: Path) -> None:
    stub = await StubApp().start()
    try:
        config = write_config(tmp_path, base_config(stub.url, database))
        proc = ProxyProcess(config)
        with pytest.raises(RuntimeError, match="webhook-sidecar migrate"):
            await proc.start()
    finally:
        await stub.stop()
