"""docs/first-deploy.md followed literally (tests/deploy/first_deploy.py), with the pod's
containers run from this checkout: the least-privilege role of step 2 migrates and serves, the
values of step 4 render and install in Helm's order with the page's Secrets, and step 7's
delivery sent twice reaches the app once. tests/container/test_first_deploy_image.py does the
same with the image built by step 1's command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from tests.acceptance.conftest import run_cli
from tests.deploy.chart_support import CHART, one, render
from tests.deploy.first_deploy import (
    Cluster,
    PodFiles,
    commands,
    role_and_database,
    the_values,
)
from tests.pgserver import PgServer
from tests.support import REPO, ProxyProcess, StubApp

SECRETS_DIR = "/etc/webhook-sidecar/secrets"


@dataclass
class LocalPod:
    """The pod's containers as processes of this checkout: the config's secret paths point
    under the test's directory, and the proxy listens on loopback ports of its choice."""

    proxy: ProxyProcess | None = None

    async def build(self, command: str, cwd: Path) -> None:
        pass  # no image here: the checkout is what it would contain

    def localised(self, files: PodFiles) -> Path:
        data: dict[str, Any] = yaml.safe_load(files.config.read_text())
        data["listen"] = data["admin_listen"] = "127.0.0.1:0"
        for provider in data["providers"].values():
            for ref in provider["secrets"]:
                ref["file"] = ref["file"].replace(SECRETS_DIR, str(files.secrets))
        path = files.config.with_name("local.yaml")
        path.write_text(yaml.safe_dump(data))
        return path

    async def migrate(self, files: PodFiles) -> None:
        await self.cli(["migrate"], files)

    async def start(self, files: PodFiles) -> tuple[str, str]:
        self.proxy = await ProxyProcess(self.localised(files), env=files.env).start()
        return self.proxy.listen, self.proxy.admin

    async def cli(self, argv: list[str], files: PodFiles) -> str:
        env = {**os.environ, **files.env, "WEBHOOK_SIDECAR_CONFIG": str(self.localised(files))}
        code, out, err = await run_cli(*argv, env=env)
        assert code == 0, (argv, out, err)
        return out

    async def stop(self) -> None:
        if self.proxy is not None:
            await self.proxy.terminate()
            self.proxy = None


@pytest.mark.postgres
async def test_the_page_followed_literally_delivers_once(pg_server: PgServer,
                                                         tmp_path: Path) -> None:
    app = await StubApp().start()
    pod = LocalPod()
    try:
        async with role_and_database(pg_server.admin_dsn) as (names, role):
            cluster = Cluster(tmp_path, pod, names, app.url)
            await cluster.follow()
            send = next(out for out in cluster.outputs if "#2" in out)
            assert re.search(r"#1 status=200", send), send
            assert re.search(r"#2 status=200.*replay=true", send), send
            assert app.count("evt_first_deploy_1") == 1
            assert any("evt_first_deploy_1" in out for out in cluster.outputs), "events list"
            metrics = cluster.outputs[-1]
            assert 'result="new"' in metrics and 'result="duplicate"' in metrics, metrics
            # As the role of step 2: no superuser, the tables in its own schema.
            assert cluster.files is not None
            conn = await asyncpg.connect(cluster.files.env["WEBHOOK_SIDECAR_STORE_URL"])
            try:
                assert not await conn.fetchval(
                    "SELECT rolsuper OR rolcreatedb OR rolcreaterole FROM pg_roles "
                    "WHERE rolname = current_user")
                where = await conn.fetch("SELECT DISTINCT table_schema FROM information_schema"
                                         ".tables WHERE table_name LIKE 'webhook_%'")
                assert [r["table_schema"] for r in where] == [role]
            finally:
                await conn.close()
            await pod.stop()
    finally:
        await pod.stop()
        await app.stop()


def test_the_values_render_with_the_names_the_page_uses() -> None:
    docs = render(CHART, the_values(), name="webhooks")
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["name"] == "webhooks-webhook-sidecar"
    assert one(docs, "Service", "webhooks-webhook-sidecar")["spec"]["ports"][0]["port"] == 80
    pod = deployment["spec"]["template"]["spec"]
    assert [c["args"] for c in pod["initContainers"]] == [["migrate"]]
    assert any(s["metadata"]["name"] == "webhooks-webhook-sidecar-forward-signing"
               for s in docs if s["kind"] == "Secret")
    text = (REPO / "docs" / "first-deploy.md").read_text(encoding="utf-8")
    assert "webhooks-webhook-sidecar-forward-signing" in text


@pytest.mark.parametrize("command", ["send", "events list"])
def test_the_cli_flags_the_page_uses_exist(command: str) -> None:
    help_text = subprocess.run([sys.executable, "-m", "sidecar", *command.split(), "--help"],
                               cwd=REPO, capture_output=True, text=True, timeout=60,
                               check=True).stdout
    used = [c for c in commands() if f"webhook-sidecar {command}" in c]
    assert used, command
    for flag in {f for line in used for f in re.findall(r"(--[a-z-]+)", line)}:
        assert flag in help_text, (command, flag)
