"""docs/first-deploy.md followed literally, command by command, as far as a machine without a
cluster goes: :func:`follow` plays each shell command of the page, in the page's order, and a
command no step knows fails, so the page cannot grow a step nobody tried. Used by
tests/deploy/test_first_deploy.py (the proxy from the checkout) and
tests/container/test_first_deploy_image.py (the image, built with the page's own command).

What stands in for the cluster, and the only things filled in: the placeholders (``whsec_…`` a
fresh Stripe secret; the database host, role and name the test's own; the app's Service a
loopback stub app), and ``kubectl port-forward``, which maps its local port to the proxy the
test started with the config the chart rendered. ``kubectl create secret`` records a Secret;
``helm upgrade --install`` renders the chart with the page's values and replays Helm's install
order over it with exactly those Secrets as the user's; the pod's init container runs
``migrate`` and its proxy container ``run``, with the pod's env and mounts (a :class:`Pod`);
``kubectl exec`` runs the command as the pod would. ``docker build`` runs only where the
:class:`Pod` can build (the container test), ``stripe`` never (it needs an account): the steps
check what they name instead."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import yaml

from tests.deploy import helm_order
from tests.deploy.chart_support import CHART, SIGNING_SECRET, Manifest, kinds, one, render
from tests.support import REPO

DOC = REPO / "docs" / "first-deploy.md"
RELEASE_CHART = "./helm/webhook-sidecar"
STRIPE_SECRET = "whsec_" + secrets.token_hex(16)


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(encoding="utf-8"),
                      re.M | re.S)


def commands() -> list[str]:
    """Every command of the page's shell blocks, in order, continuation lines joined."""
    return [c.strip() for block in blocks("sh")
            for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def the_values() -> dict[str, Any]:
    [values] = [yaml.safe_load(b) for b in blocks("yaml") if "mode: standalone" in b]
    assert isinstance(values, dict)
    return values


def image_of(values: dict[str, Any]) -> str:
    return f"{values['image']['repository']}:{values['image']['tag']}"


@dataclass
class PodFiles:
    """What the rendered pod gives its containers."""

    spec: Manifest                     # the Deployment's pod spec
    config: Path                       # the config file, as the ConfigMap mounts it
    secrets: Path                      # a folder per Secret, as the pod mounts them
    env: dict[str, str]                # the env it sets from Secrets


class Pod(Protocol):
    """Runs the rendered pod's containers (from a checkout, or the image)."""

    async def build(self, command: str, cwd: Path) -> None:
        """Run the page's ``docker build`` command in ``cwd``, or stand for it."""
        ...
    async def migrate(self, files: PodFiles) -> None: ...
    async def start(self, files: PodFiles) -> tuple[str, str]:
        """The proxy's webhook and admin addresses (host:port, on loopback)."""
        ...
    async def cli(self, argv: list[str], files: PodFiles) -> str: ...
    async def stop(self) -> None: ...


async def shell(command: str, cwd: Path, timeout: float = 120) -> str:
    """``command`` run by bash in ``cwd``, with this checkout's ``webhook-sidecar`` on PATH."""
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", f"set -o pipefail; {command}", cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PATH": path})
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, (command, out.decode(), err.decode())
    return out.decode()


def statements(sql: str) -> list[str]:
    return [s.strip() for s in sql.split(";") if s.strip()]


@asynccontextmanager
async def role_and_database(admin_dsn: str) -> AsyncIterator[tuple[dict[str, str], str]]:
    """The page's two SQL blocks run as written, with names made unique for this test; yields
    what to replace in the page's store URL, and the role."""
    on_server, in_database = blocks("sql")
    suffix = secrets.token_hex(4)
    role, database = f"ws_role_{suffix}", f"ws_db_{suffix}"

    def named(sql: str) -> str:
        return re.sub(r"\bwebhooks\b", database, sql.replace("webhook_sidecar", role))

    admin = await asyncpg.connect(admin_dsn)
    parts = urlsplit(admin_dsn)
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


@dataclass
class Cluster:
    """What the page's commands made so far, and where its stand-ins listen."""

    tmp: Path
    pod: Pod
    database: dict[str, str]           # the page's names -> the test's
    app_url: str
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    release: str = ""
    docs: list[Manifest] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)  # port name -> host:port
    forwards: dict[str, str] = field(default_factory=dict)   # 127.0.0.1:8080 -> the proxy's
    files: PodFiles | None = None
    outputs: list[str] = field(default_factory=list)

    def fill(self, command: str) -> str:
        for placeholder, value in self.forwards.items():
            command = command.replace(placeholder, value)
        return command.replace("whsec_…", STRIPE_SECRET)

    async def follow(self) -> None:
        """Every command of the page, in order."""
        for command in commands():
            command = self.fill(command)
            argv = shlex.split(command.split(" && ")[0])
            match argv:
                case ["docker", "build", *_]:
                    assert image_of(the_values()) in argv, argv
                    await self.pod.build(command, REPO)
                case ["docker", "push", image]:
                    assert image == image_of(the_values())  # no registry here
                case ["stripe", "webhook_endpoints", *_]:
                    self.stripe_endpoint(argv)
                case ["stripe", "trigger", *_]:
                    pass  # Stripe's own delivery: the send stands in for it
                case ["kubectl", "create", "secret", "generic", name, *literals]:
                    self.secrets[name] = dict(a.split("=", 1)[1].split("=", 1) for a in literals
                                              if a.startswith("--from-literal="))
                case ["helm", "upgrade", "--install", release, chart, *_]:
                    await self.install(release, chart)
                case ["helm", "test", release]:
                    self.helm_test(release)
                case ["kubectl", "port-forward", target, ports]:
                    self.port_forward(target, ports)
                case ["kubectl", "exec", target, "--", "webhook-sidecar", *rest]:
                    assert target.removeprefix("deploy/") == one(self.docs, "Deployment")[
                        "metadata"]["name"], target
                    assert self.files is not None
                    self.outputs.append(await self.pod.cli(rest, self.files))
                case ["echo" | "webhook-sidecar" | "curl", *_]:
                    self.outputs.append(await shell(command, self.tmp))
                case _:
                    raise AssertionError(f"no step plays this command of the page: {command}")

    def stripe_endpoint(self, argv: list[str]) -> None:
        values = the_values()
        url = next(a for a in argv if a.startswith("url=")).removeprefix("url=")
        parts = urlsplit(url)
        assert parts.scheme == "https" and parts.hostname in values["ingress"]["hosts"], url
        assert parts.path in {p["path"] for p in values["providers"].values()}, url

    async def install(self, release: str, chart: str) -> None:
        assert chart == RELEASE_CHART
        self.release = release
        self.docs = render(CHART, the_values(), name=release, tests=True)
        # Helm's order, with exactly the Secrets the page made so far as the user's own.
        findings = helm_order.install(self.docs, user_owned={
            helm_order.Ref("Secret", name) for name in self.secrets})
        assert not findings, "\n".join(map(str, findings))
        await self.start_pod()

    def helm_test(self, release: str) -> None:
        assert release == self.release
        [pod] = [d for d in kinds(self.docs, "Pod")
                 if d["metadata"]["annotations"].get("helm.sh/hook") == "test"]
        env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert {"WEBHOOK_URL", "ADMIN_URL"} <= env, "the page says helm test checks /readyz"

    def port_forward(self, target: str, ports: str) -> None:
        kind, name = target.split("/", 1)
        local, remote = ports.split(":")
        service = one(self.docs, "Service", name)
        assert kind == "svc" and service["metadata"]["name"] == name, target
        [port] = [p for p in service["spec"]["ports"] if p["port"] == int(remote)]
        self.forwards[f"127.0.0.1:{local}"] = self.addresses[port["targetPort"]]

    # --- the pod, as the kubelet would start it -----------------------------------------------

    async def start_pod(self) -> None:
        pod = one(self.docs, "Deployment")["spec"]["template"]["spec"]
        config = yaml.safe_load(one(self.docs, "ConfigMap", "-config")["data"]["config.yaml"])
        config["upstream"]["url"] = self.app_url
        for provider in config["providers"].values():
            for ref in provider["secrets"]:
                self.mount(pod, ref["file"])
        path = self.tmp / "config" / "config.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        made = {"token": secrets.token_hex(16), "secret": SIGNING_SECRET}  # as the chart makes
        [migrate] = pod["initContainers"]
        assert migrate["args"] == ["migrate"]
        env: dict[str, str] = {}
        for var in migrate["env"]:
            if "valueFrom" in var:
                ref = var["valueFrom"]["secretKeyRef"]
                value = (self.secrets[ref["name"]][ref["key"]] if ref["name"] in self.secrets
                         else made[ref["key"]])
                env[var["name"]] = self.database_url(value)
        self.files = PodFiles(pod, path, self.tmp / "secrets", env)
        await self.pod.migrate(self.files)
        listen, admin = await self.pod.start(self.files)
        self.addresses = {"webhooks": listen, "webhook-admin": admin}

    def mount(self, pod: Manifest, file: str) -> None:
        """The Secret key a config file path reads, written under ``tmp/secrets`` as the pod
        mounts it under its secrets directory."""
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in pod["containers"][0]["volumeMounts"]:
            if file.startswith(mount["mountPath"] + "/"):
                secret = volumes[mount["name"]]["secret"]["secretName"]
                key = file.removeprefix(mount["mountPath"] + "/")
                local = self.tmp / "secrets" / secret / key
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(self.secrets[secret][key])
                return
        raise AssertionError(f"{file} is mounted from no volume")

    def database_url(self, value: str) -> str:
        for page_name, ours in self.database.items():
            value = value.replace(page_name, ours)
        return value
