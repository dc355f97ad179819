"""docs/first-deploy.md followed literally, command by command, as far as a machine without a
cluster goes. Each shell command of the page is played by a step below, in the page's order; a
command no step knows fails the test, so the page cannot grow a step nobody tried.

What stands in for the cluster, and the only things the test fills in: the placeholders
(``whsec_…`` a fresh Stripe secret; the database host, role and name the test's own; the app's
Service a loopback stub app), and ``kubectl port-forward``, which maps its local port to the
proxy the test started with the config the chart rendered. ``kubectl create secret`` records a
Secret; ``helm upgrade --install`` renders the chart with the page's values and replays Helm's
install order over it with exactly those Secrets as the user's; the pod's init container runs
``migrate`` and its proxy container ``run`` with the pod's env; ``kubectl exec`` runs the command
as the pod would. ``docker`` runs only in the container test (scripts/container-test), and
``stripe`` never (it needs an account): the test checks what they name instead."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import yaml

from tests.acceptance.conftest import run_cli
from tests.deploy.chart_support import CHART, SIGNING_SECRET, Manifest, kinds, one, render
from tests.pgserver import PgServer
from tests.support import REPO, ProxyProcess, StubApp

DOC = REPO / "docs" / "first-deploy.md"
RELEASE_CHART = "./helm/webhook-sidecar"
STRIPE_SECRET = "whsec_" + secrets.token_hex(16)


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(encoding="utf-8"),
                      re.M | re.S)


def commands() -> Iterator[str]:
    """Every command of the page's shell blocks, in order, continuation lines joined."""
    for block in blocks("sh"):
        yield from (c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip())


def statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";") if s.strip()]


def the_values() -> dict[str, Any]:
    [values] = [yaml.safe_load(b) for b in blocks("yaml") if "mode: standalone" in b]
    assert isinstance(values, dict)
    return values


@dataclass
class Cluster:
    """What the page's commands made so far, and where its stand-ins listen."""

    tmp: Path
    database: dict[str, str]           # the doc's names -> the test's
    app_url: str
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    release: str = ""
    docs: list[Manifest] = field(default_factory=list)
    proxy: ProxyProcess | None = None
    forwards: dict[str, str] = field(default_factory=dict)  # 127.0.0.1:8080 -> the proxy's
    pod_env: dict[str, str] = field(default_factory=dict)

    def fill(self, command: str) -> str:
        for placeholder, value in self.forwards.items():
            command = command.replace(placeholder, value)
        return command.replace("whsec_…", STRIPE_SECRET)

    # --- the steps ---------------------------------------------------------------------------

    def docker(self, argv: list[str]) -> None:
        # Built and pushed in the container test; here: the image is the one the values name.
        image = the_values()["image"]
        assert f"{image['repository']}:{image['tag']}" in argv, argv

    def stripe(self, argv: list[str]) -> None:
        ingress = the_values().get("ingress", {"hosts": ["webhooks.example.com"]})
        url = next(a for a in argv if a.startswith("url=")).removeprefix("url=")
        parts = urlsplit(url)
        assert parts.scheme == "https" and parts.hostname in ingress["hosts"], url
        assert parts.path in {p["path"] for p in the_values()["providers"].values()}, url

    def kubectl_create_secret(self, argv: list[str]) -> None:
        name = argv[4]
        literals = [a.split("=", 1)[1] for a in argv if a.startswith("--from-literal=")]
        self.secrets[name] = dict(literal.split("=", 1) for literal in literals)

    async def helm_install(self, argv: list[str]) -> None:
        assert argv[:3] == ["helm", "upgrade", "--install"] and argv[4] == RELEASE_CHART, argv
        self.release = argv[3]
        self.docs = render(CHART, the_values(), name=self.release, tests=True)
        check_install_order(self.docs, user_secrets=set(self.secrets))
        await self.start_pod()

    def helm_test(self, argv: list[str]) -> None:
        assert argv[2] == self.release
        [pod] = [d for d in kinds(self.docs, "Pod")
                 if d["metadata"]["annotations"].get("helm.sh/hook") == "test"]
        env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert {"WEBHOOK_URL", "ADMIN_URL"} <= env, "the page says helm test checks /readyz"

    def kubectl_port_forward(self, argv: list[str]) -> None:
        assert self.proxy is not None
        kind, name = argv[2].split("/", 1)
        local, remote = (int(p) for p in argv[3].split(":"))
        service = one(self.docs, "Service", name)
        assert kind == "svc" and service["metadata"]["name"] == name
        [port] = [p for p in service["spec"]["ports"] if p["port"] == remote]
        target = {"webhooks": self.proxy.listen, "webhook-admin": self.proxy.admin}
        self.forwards[f"127.0.0.1:{local}"] = target[port["targetPort"]]

    async def kubectl_exec(self, argv: list[str]) -> str:
        kind, name = argv[2].split("/", 1)
        assert kind == "deploy" and one(self.docs, "Deployment", name)
        inner = argv[argv.index("--") + 1:]
        assert inner[0] == "webhook-sidecar"
        code, out, err = await run_cli(*inner[1:], env={**os.environ, **self.pod_env})
        assert code == 0, err
        return out

    async def shell(self, command: str) -> str:
        """A command run by bash in the page's working directory (the app answers meanwhile:
        it runs on this event loop)."""
        path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # webhook-sidecar on PATH
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", f"set -o pipefail; {self.fill(command)}", cwd=self.tmp,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PATH": path})
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, (command, out.decode(), err.decode())
        return out.decode()

    # --- the pod, as the kubelet would start it -----------------------------------------------

    async def start_pod(self) -> None:
        pod = one(self.docs, "Deployment")["spec"]["template"]["spec"]
        config = yaml.safe_load(one(self.docs, "ConfigMap", "-config")["data"]["config.yaml"])
        config["listen"] = config["admin_listen"] = "127.0.0.1:0"  # loopback, any port
        config["upstream"]["url"] = self.app_url
        for provider in config["providers"].values():
            for ref in provider["secrets"]:
                ref["file"] = str(self.mounted(pod, ref["file"]))
        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        self.pod_env = {"WEBHOOK_SIDECAR_CONFIG": str(path)}
        # The chart's generated Secrets, as it makes them.
        made = {"token": secrets.token_hex(16), "secret": SIGNING_SECRET}
        [migrate] = pod["initContainers"]
        for var in migrate["env"]:
            if "valueFrom" in var:
                ref = var["valueFrom"]["secretKeyRef"]
                mine = self.secrets.get(ref["name"], {})
                value = mine[ref["key"]] if ref["name"] in self.secrets else made[ref["key"]]
                self.pod_env[var["name"]] = self.database_url(value)
        code, _, err = await run_cli(*migrate["args"], env={**os.environ, **self.pod_env})
        assert code == 0, err
        self.proxy = await ProxyProcess(path, env=self.pod_env).start()

    def mounted(self, pod: Manifest, file: str) -> Path:
        """The Secret key a config file path reads, written where the test's config points."""
        container = pod["containers"][0]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in container["volumeMounts"]:
            if file.startswith(mount["mountPath"] + "/"):
                secret = volumes[mount["name"]]["secret"]["secretName"]
                key = file.removeprefix(mount["mountPath"] + "/").split("/")[-1]
                local = self.tmp / "secrets" / secret / key
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(self.secrets[secret][key])
                return local
        raise AssertionError(f"{file} is mounted from no volume")

    def database_url(self, value: str) -> str:
        for doc_name, ours in self.database.items():
            value = value.replace(doc_name, ours)
        return value


def check_install_order(docs: list[Manifest], user_secrets: set[str]) -> None:
    """Every Secret a pod refers to exists when Helm starts it: the user's (created above)
    or one the chart renders as a release resource before the pod's own."""
    rendered = {d["metadata"]["name"] for d in kinds(docs, "Secret")}
    hooks = [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})
             and d["metadata"]["annotations"]["helm.sh/hook"] != "test"]
    assert not hooks, "a pre-install hook starts before the release's Secrets exist"
    for doc in kinds(docs, "Deployment"):
        pod = doc["spec"]["template"]["spec"]
        text = yaml.safe_dump(pod)
        for name in re.findall(r"secretName: (\S+)", text) + re.findall(
                r"secretKeyRef:\n\s+key: \S+\n\s+name: (\S+)", text):
            assert name in rendered | user_secrets, name


@pytest.fixture
async def role_and_database(pg_server: PgServer) -> Any:
    """The page's two SQL blocks run as written, with names made unique for this test."""
    on_server, in_database = blocks("sql")
    suffix = secrets.token_hex(4)
    role, database = f"ws_role_{suffix}", f"ws_db_{suffix}"

    def named(sql: str) -> str:
        return re.sub(r"\bwebhooks\b", database, sql.replace("webhook_sidecar", role))

    admin = await asyncpg.connect(pg_server.admin_dsn)
    parts = urlsplit(pg_server.admin_dsn)
    try:
        for statement in statements(named(on_server)):
            await admin.execute(statement)
        db_admin = await asyncpg.connect(urlunsplit(parts._replace(path=f"/{database}")))
        try:
            for statement in statements(named(in_database)):
                await db_admin.execute(statement)
        finally:
            await db_admin.close()
        host = f"{parts.hostname or '127.0.0.1'}:{parts.port or 5432}"
        yield {"webhook_sidecar:": f"{role}:", "postgres.db.svc:5432": host,
               "/webhooks": f"/{database}"}, role
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


@pytest.mark.postgres
async def test_the_page_followed_literally_delivers_once(
        role_and_database: tuple[dict[str, str], str], tmp_path: Path) -> None:
    names, role = role_and_database
    app = await StubApp().start()
    cluster = Cluster(tmp_path, names, app.url)
    seen: list[str] = []
    try:
        for command in commands():
            argv = shlex.split(cluster.fill(command).split(" && ")[0])
            match argv:
                case ["docker", *_]:
                    cluster.docker(argv)
                case ["stripe", "webhook_endpoints", *_]:
                    cluster.stripe(argv)
                case ["stripe", "trigger", *_]:
                    pass  # Stripe's own delivery: the send below stands in for it
                case ["kubectl", "create", "secret", "generic", *_]:
                    cluster.kubectl_create_secret(argv)
                case ["helm", "upgrade", *_]:
                    await cluster.helm_install(argv)
                case ["helm", "test", *_]:
                    cluster.helm_test(argv)
                case ["kubectl", "port-forward", *_]:
                    cluster.kubectl_port_forward(argv)
                case ["kubectl", "exec", *_]:
                    seen.append(await cluster.kubectl_exec(argv))
                case ["echo" | "webhook-sidecar" | "curl", *_]:
                    seen.append(await cluster.shell(command))
                case _:
                    raise AssertionError(f"no step plays this command of the page: {command}")
        send = next(out for out in seen if "#2" in out)
        assert re.search(r"#1 status=200", send) and re.search(r"#2 status=200.*replay=true",
                                                               send), send
        assert app.count("evt_first_deploy_1") == 1
        assert any("evt_first_deploy_1" in out for out in seen), "events list"
        metrics = seen[-1]
        assert 'result="new"' in metrics and 'result="duplicate"' in metrics, metrics
        # As the role of step 2: no superuser, the tables in its own schema.
        async with asyncpg.create_pool(cluster.pod_env["WEBHOOK_SIDECAR_STORE_URL"],
                                       min_size=1, max_size=1) as pool:
            assert not await pool.fetchval(
                "SELECT rolsuper OR rolcreatedb OR rolcreaterole FROM pg_roles "
                "WHERE rolname = current_user")
            where = await pool.fetch("SELECT DISTINCT table_schema FROM information_schema"
                                     ".tables WHERE table_name LIKE 'webhook_%'")
            assert [r["table_schema"] for r in where] == [role]
    finally:
        if cluster.proxy is not None:
            await cluster.proxy.terminate()
        await app.stop()


@pytest.mark.parametrize("command", ["send", "events list"])
def test_the_cli_flags_the_doc_uses_exist(command: str) -> None:
    help_text = subprocess.run([sys.executable, "-m", "sidecar", *command.split(), "--help"],
                               cwd=REPO, capture_output=True, text=True, timeout=60,
                               check=True).stdout
    used = [c for c in commands() if f"webhook-sidecar {command}" in c]
    assert used, command
    for flag in {f for line in used for f in re.findall(r"(--[a-z-]+)", line)}:
        assert flag in help_text, (command, flag)
