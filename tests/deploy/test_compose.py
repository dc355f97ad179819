"""docker-compose.yaml, the quick start (app + proxy + PostgreSQL), and docker-compose.mariadb.yaml
(the same with MariaDB), checked without an engine:
its structure, that the proxy's config (config.example.yaml, mounted where the image looks)
loads with exactly the environment the file gives it, that the pieces point at each other, and
that the stand-in app is Python that answers. ``scripts/container-test`` also runs
``docker-compose config`` on it and runs its services' commands in the built image."""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from sidecar.config.loader import load_config_file
from tests.deploy.test_dockerfile import FINAL, env_of, last

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yaml"
SIDECAR_SERVICES = ("migrate", "proxy", "app")
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR} / ${VAR:-default} substitution (what `docker compose config` does)."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: env.get(m["name"]) or m["default"] or "", value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


RAW = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
FILE = interpolate(RAW, {})
SERVICES: dict[str, dict[str, Any]] = FILE["services"]


def config_mount(service: dict[str, Any]) -> tuple[Path, str]:
    [volume] = [v for v in service["volumes"] if v.endswith(":ro")]
    source, target, _ = volume.split(":")
    return REPO / source, target


def test_services_and_images() -> None:
    assert "version" not in RAW, "the Compose Specification has no version key"
    assert set(SERVICES) == {"postgres", *SIDECAR_SERVICES}
    assert SERVICES["postgres"]["image"] == "postgres:16"
    # One image, built from this repository, for the proxy, its migration and the stand-in app.
    for name in SIDECAR_SERVICES:
        assert SERVICES[name]["build"] == "." and SERVICES[name]["image"] == (
            "webhook-sidecar:local"), name


def test_start_order_postgres_then_migrate_then_proxy() -> None:
    assert SERVICES["migrate"]["command"] == ["migrate"]
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert "healthcheck" in SERVICES["postgres"]
    assert SERVICES["proxy"]["command"] == ["run"]
    assert SERVICES["proxy"]["depends_on"]["migrate"] == {
        "condition": "service_completed_successfully"}
    assert "app" in SERVICES["proxy"]["depends_on"]


def test_proxy_runs_like_the_chart_runs_it() -> None:
    proxy = SERVICES["proxy"]
    assert proxy["read_only"] is True and "/tmp" in proxy["tmpfs"]
    assert "user" not in proxy, "the image's non-root user"
    listen_port = yaml.safe_load((REPO / "config.example.yaml").read_text())["listen"]
    assert proxy["ports"] == [f"{listen_port.rpartition(':')[2]}:8080"]
    assert set(last(FINAL, "EXPOSE").argument.split()) >= {"8080"}
    # Longer than shutdown_timeout + the proxy's overrun, so deliveries in flight are recorded.
    example = load_config_file(config_mount(proxy)[0], env=SERVICES["proxy"]["environment"])
    assert int(proxy["stop_grace_period"].removesuffix("s")) >= example.shutdown_timeout + 2


@pytest.mark.parametrize("name", ["migrate", "proxy"])
def test_config_is_mounted_where_the_image_reads_it_and_loads(name: str) -> None:
    service = SERVICES[name]
    source, target = config_mount(service)
    assert source.is_file(), source
    assert target == env_of(FINAL)["WEBHOOK_SIDECAR_CONFIG"]
    env = service["environment"]
    # Every ${VAR} and {env: VAR} the config reads is set by the compose file, and nothing else
    # from this machine's environment is needed.
    config = load_config_file(source, env=env)
    assert config.store.kind == "postgresql"
    store = urlsplit(config.store.url)
    postgres = SERVICES["postgres"]["environment"]
    assert (store.hostname, store.port) == ("postgres", 5432)
    assert (store.username, store.password, store.path.lstrip("/")) == (
        postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"])
    upstream = urlsplit(config.upstream.url)
    assert upstream.hostname == "app" and upstream.port == 3000
    assert {p.key for p in config.providers} >= {"stripe", "github"}


def test_the_readme_snippet_signs_with_the_compose_secret() -> None:
    header = "\n".join(line for line in COMPOSE.read_text().splitlines()
                       if line.startswith("#"))
    secret = SERVICES["proxy"]["environment"]["STRIPE_WEBHOOK_SECRET"]
    assert f"--preset stripe --secret {secret}" in header
    assert "--url http://127.0.0.1:8080/webhooks/stripe" in header


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_stand_in_app_answers_posts() -> None:
    app = SERVICES["app"]
    assert app["entrypoint"] == ["python", "-c"]
    [script] = app["command"]
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-c", script], env={**os.environ,
                               "PORT": str(port)}, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("POST", "/webhooks/stripe", body=b'{"id": "evt_1"}',
                                   headers={"Idempotency-Key": "stripe:evt_1",
                                            "X-Webhook-Sidecar-Attempt": "1"})
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the stand-in app did not listen"
                time.sleep(0.1)
        answer = connection.getresponse()
        assert answer.status == 200 and b"stripe:evt_1" in answer.read()
        connection.close()
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=20)
    assert "key=stripe:evt_1 attempt=1" in out


# --- docker-compose.mariadb.yaml: the same quick start on MariaDB ------------------------------

MARIADB = yaml.safe_load((REPO / "docker-compose.mariadb.yaml").read_text(encoding="utf-8"))
MARIADB_SERVICES: dict[str, dict[str, Any]] = interpolate(MARIADB, {})["services"]


def test_the_mariadb_quick_start_runs_the_same_proxy_after_migrate() -> None:
    assert set(MARIADB_SERVICES) == {"mariadb", *SIDECAR_SERVICES}
    assert MARIADB_SERVICES["mariadb"]["image"].startswith("mariadb:")
    assert "healthcheck" in MARIADB_SERVICES["mariadb"]
    assert MARIADB_SERVICES["migrate"]["depends_on"] == {
        "mariadb": {"condition": "service_healthy"}}
    assert MARIADB_SERVICES["app"]["extends"] == {"file": "docker-compose.yaml",
                                                  "service": "app"}
    # The proxy and its migration are the PostgreSQL quick start's, but for the store.
    for name in ("migrate", "proxy"):
        mine, theirs = MARIADB_SERVICES[name], SERVICES[name]
        assert {k: v for k, v in mine.items() if k not in ("depends_on", "environment")} == {
            k: v for k, v in theirs.items() if k not in ("depends_on", "environment")}
        assert {k: v for k, v in mine["environment"].items()
                if k != "WEBHOOK_SIDECAR_STORE_URL"} == {
            k: v for k, v in theirs["environment"].items() if k != "WEBHOOK_SIDECAR_STORE_URL"}
    assert MARIADB_SERVICES["proxy"]["depends_on"] == SERVICES["proxy"]["depends_on"]


@pytest.mark.parametrize("name", ["migrate", "proxy"])
def test_the_mariadb_quick_start_config_loads_with_a_mysql_store(name: str) -> None:
    service = MARIADB_SERVICES[name]
    config = load_config_file(config_mount(service)[0], env=service["environment"])
    assert config.store.kind == "mysql"
    store = urlsplit(config.store.url)
    mariadb = MARIADB_SERVICES["mariadb"]["environment"]
    assert (store.scheme, store.hostname, store.port) == ("mysql", "mariadb", 3306)
    assert (store.username, store.password, store.path.lstrip("/")) == (
        mariadb["MARIADB_USER"], mariadb["MARIADB_PASSWORD"], mariadb["MARIADB_DATABASE"])
