"""docs/first-deploy.md, "MySQL or MariaDB instead": the page's SQL run as written on the
suite's MariaDB (names made unique for the test), then ``webhook-sidecar migrate`` as the
migrate user, and the proxy run as the run user delivering one event twice (forwarded once,
then replayed). The run user cannot migrate, and is told which GRANT it lacks."""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncmy
import pytest

from tests.acceptance.conftest import run_cli
from tests.deploy.first_deploy import DOC
from tests.mariadbserver import MariaDBServer, admin
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

PAGE_PASSWORDS = {"webhook_sidecar_migrate": "change-me-too", "webhook_sidecar": "change-me"}
PAGE_URL = "mysql://webhook_sidecar:change-me@mysql.db.svc:3306/webhooks"


def the_sql() -> str:
    [block] = re.findall(r"^```mysql\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.M | re.S)
    return block


def statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";") if s.strip()]


@pytest.fixture
async def users(mariadb_server: MariaDBServer) -> AsyncIterator[dict[str, str]]:
    """The page's SQL, run as written with unique names; the store URL of each user."""
    suffix = secrets.token_hex(4)
    names = {"webhook_sidecar_migrate": f"ws_mig_{suffix}", "webhook_sidecar": f"ws_run_{suffix}",
             "webhooks": f"ws_db_{suffix}"}

    def named(sql: str) -> str:
        # Longest first: webhook_sidecar is a prefix of webhook_sidecar_migrate.
        return re.sub(r"\b(webhook_sidecar_migrate|webhook_sidecar|webhooks)\b",
                      lambda m: names[m[0]], sql)

    sql = the_sql()
    assert PAGE_URL in DOC.read_text(encoding="utf-8")
    try:
        await admin(mariadb_server.admin_dsn, *statements(named(sql)))
        server = mariadb_server.admin_dsn.split("@", 1)[1].split("/", 1)[0]
        yield {page: f"mysql://{names[page]}:{password}@{server}/{names['webhooks']}"
               for page, password in PAGE_PASSWORDS.items()}
    finally:
        await admin(mariadb_server.admin_dsn,
                    f"DROP DATABASE IF EXISTS `{names['webhooks']}`",
                    f"DROP USER IF EXISTS '{names['webhook_sidecar_migrate']}'@'%'",
                    f"DROP USER IF EXISTS '{names['webhook_sidecar']}'@'%'")


async def test_the_pages_users_migrate_and_deliver_once(
    users: dict[str, str], tmp_path: Path,
) -> None:
    stub = await StubApp().start()
    proxy = None
    try:
        run_config = write_config(tmp_path, base_config(stub.url, users["webhook_sidecar"]))
        migrate_config = write_config(
            tmp_path, base_config(stub.url, users["webhook_sidecar_migrate"]), "migrate.yaml")

        # The run user may not migrate: refused before anything is written, naming the GRANT.
        code, out, err = await run_cli("migrate", "--config", str(run_config))
        assert code != 0 and "GRANT" in err and "CREATE" in err, (out, err)
        code, out, err = await run_cli("migrate", "--config", str(migrate_config))
        assert code == 0 and "applied: 0001_init" in out, (out, err)

        proxy = await ProxyProcess(run_config).start()
        body = stripe_event("evt_first_deploy_mysql")
        async with aiohttp.ClientSession() as client:
            url = proxy.url + "/webhooks/stripe"
            first = await post(client, url, body, stripe_headers(body))
            second = await post(client, url, body, stripe_headers(body))
        assert first[0] == 200 and "X-Webhook-Sidecar-Replay" not in first[1], first
        assert second[0] == 200 and second[1]["X-Webhook-Sidecar-Replay"] == "true", second
        assert stub.count("evt_first_deploy_mysql") == 1
    finally:
        if proxy is not None:
            await proxy.terminate()
        await stub.stop()


async def test_the_run_user_may_not_change_the_schema(users: dict[str, str]) -> None:
    run = users["webhook_sidecar"]
    database = run.rsplit("/", 1)[1]
    with pytest.raises(asyncmy.errors.Error, match="denied"):
        await admin(run, f"CREATE TABLE `{database}`.t (i INT)")
    # The migrate user may (what migrate needs), so the refusal above is the grant's.
    await admin(users["webhook_sidecar_migrate"], f"CREATE TABLE `{database}`.t (i INT)",
                f"DROP TABLE `{database}`.t")
