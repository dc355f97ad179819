"""docs/first-deploy.md as written: its least-privilege SQL on a real PostgreSQL (migrate as
that role, then a delivery through the proxy), its values rendered by the chart, the names
and CLI flags its commands use."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import pytest
import yaml

from tests.acceptance.conftest import run_cli
from tests.deploy.chart_support import CHART, one, render
from tests.pgserver import PgServer
from tests.support import (
    REPO,
    ProxyProcess,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

DOC = REPO / "docs" / "first-deploy.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(encoding="utf-8"),
                      re.M | re.S)


def statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";") if s.strip()]


@pytest.mark.postgres
async def test_the_least_privilege_role_migrates_and_serves(pg_server: PgServer,
                                                            tmp_path: Path) -> None:
    """The doc's two SQL blocks, with names made unique for this test: the role is no
    superuser, and `migrate` then `run` work as it, with the tables in its own schema."""
    on_server, in_database = blocks("sql")
    suffix = secrets.token_hex(4)
    role, database = f"ws_role_{suffix}", f"ws_db_{suffix}"

    def named(sql: str) -> str:
        return re.sub(r"\bwebhooks\b", database, sql.replace("webhook_sidecar", role))

    admin = await asyncpg.connect(pg_server.admin_dsn)
    try:
        for statement in statements(named(on_server)):
            await admin.execute(statement)
        parts = urlsplit(pg_server.admin_dsn)
        db_admin = await asyncpg.connect(urlunsplit(parts._replace(path=f"/{database}")))
        try:
            for statement in statements(named(in_database)):
                await db_admin.execute(statement)
        finally:
            await db_admin.close()
        host = parts.hostname or "127.0.0.1"
        store_url = f"postgresql://{role}:change-me@{host}:{parts.port or 5432}/{database}"
        await serve_one_event(store_url, role, tmp_path)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


async def serve_one_event(store_url: str, role: str, tmp_path: Path) -> None:
    stub = await StubApp().start()
    proxy = None
    try:
        config = write_config(tmp_path, base_config(stub.url, store_url))
        code, _, err = await run_cli("migrate", "--config", str(config))
        assert code == 0, err
        proxy = await ProxyProcess(config).start()
        body = stripe_event("evt_least_privilege")
        async with aiohttp.ClientSession() as client:
            status, _, _ = await post(client, proxy.url + "/webhooks/stripe", body,
                                      stripe_headers(body))
        assert status == 200
        assert [seen.event_id for seen in stub.seen] == ["evt_least_privilege"]
        conn = await asyncpg.connect(store_url)
        try:
            assert not await conn.fetchval(
                "SELECT rolsuper OR rolcreatedb OR rolcreaterole FROM pg_roles "
                "WHERE rolname = current_user")
            where = await conn.fetch("SELECT table_schema, table_name FROM information_schema"
                                     ".tables WHERE table_name LIKE 'webhook_%'")
            assert {r["table_schema"] for r in where} == {role}
            assert await conn.fetchval("SELECT count(*) FROM webhook_event") == 1
        finally:
            await conn.close()
    finally:
        if proxy is not None:
            await proxy.terminate()
        await stub.stop()


def test_the_standalone_values_render_with_the_names_the_doc_uses() -> None:
    [values] = [yaml.safe_load(b) for b in blocks("yaml") if "mode: standalone" in b]
    docs = render(CHART, values, name="webhooks")
    deployment = one(docs, "Deployment")
    service = one(docs, "Service", "webhooks-webhook-sidecar")
    assert deployment["metadata"]["name"] == "webhooks-webhook-sidecar"
    assert service["spec"]["ports"][0]["port"] == 80
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/platform/webhook-sidecar:0.1.0"
    assert [c["args"] for c in deployment["spec"]["template"]["spec"]["initContainers"]] == [["migrate"]]
    assert any(s["metadata"]["name"] == "webhooks-webhook-sidecar-forward-signing"
               for s in docs if s["kind"] == "Secret")
    config = yaml.safe_load(one(docs, "ConfigMap", "-config")["data"]["config.yaml"])
    assert config["providers"]["stripe"]["secrets"] == [
        {"file": "/etc/webhook-sidecar/secrets/stripe-webhook/signing-secret"}]
    text = DOC.read_text(encoding="utf-8")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    for path in re.findall(r"--config (/etc/\S+)", text):
        assert path.rsplit("/", 1)[0] in mounts, path


@pytest.mark.parametrize("command", ["send", "events list"])
def test_the_cli_flags_the_doc_uses_exist(command: str) -> None:
    help_text = subprocess.run([sys.executable, "-m", "sidecar", *command.split(), "--help"],
                               cwd=REPO, capture_output=True, text=True, timeout=60,
                               check=True).stdout
    text = " ".join(b for b in blocks("sh"))
    used = re.findall(rf"webhook-sidecar {command}((?:\\\n|[^\n])*)", text)
    assert used, command
    for flag in {f for line in used for f in re.findall(r"(--[a-z-]+)", line)}:
        assert flag in help_text, (command, flag)
