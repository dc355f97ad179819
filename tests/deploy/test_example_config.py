"""``config.example.yaml`` is valid by the schema and starts the proxy: run as a subprocess
(``python -m sidecar run``) on a copy with a temporary SQLite store and free ports, it logs
``listening``, answers /healthz and /readyz on its admin address and exits 0 on SIGTERM."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import aiohttp
import jsonschema
import pytest
import yaml

from sidecar.config.keyring import Keyring
from sidecar.config.loader import parse_config
from sidecar.config.schema import SCHEMA_FILE
from tests.support import ProxyProcess

REPO = Path(__file__).resolve().parents[2]


async def test_example_config_validates_and_starts_the_proxy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example = yaml.safe_load((REPO / "config.example.yaml").read_text(encoding="utf-8"))
    schema = json.loads((REPO / SCHEMA_FILE).read_text(encoding="utf-8"))
    jsonschema.validate(example, schema, cls=jsonschema.Draft202012Validator)

    config = dict(example, listen="127.0.0.1:0", admin_listen="127.0.0.1:0")
    jsonschema.validate(config, schema, cls=jsonschema.Draft202012Validator)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", "whsec_example")
    monkeypatch.setenv("ACME_WEBHOOK_SECRET", "acme-example")
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "github-example")
    monkeypatch.setenv("WEBHOOK_SIDECAR_STORE_URL", f"sqlite:///{tmp_path / 'events.db'}")
    monkeypatch.delenv("APP_URL", raising=False)

    proxy = await ProxyProcess(path).start(timeout=30)
    try:
        listening = next(e for e in proxy.logs if e.get("event") == "listening")
        assert listening["store"] == "sqlite"
        assert sorted(listening["providers"]) == sorted(example["providers"])
        async with aiohttp.ClientSession() as client:
            async with client.get(f"{proxy.admin_url}/healthz") as resp:
                assert resp.status == 200
            async with client.get(f"{proxy.admin_url}/readyz") as resp:
                assert resp.status == 200
    finally:
        code = await proxy.terminate(timeout=30)
    assert code == 0, "\n".join(proxy.raw_logs)
    assert (tmp_path / "events.db").exists()


def test_the_commented_forward_signing_block_is_valid_once_uncommented() -> None:
    """config.example.yaml shows forward authentication commented out (the example must start
    without a secret); uncommented as a user would, it validates and makes forwards signed."""
    text = (REPO / "config.example.yaml").read_text(encoding="utf-8")
    block = re.search(r"^  # signing_secrets:\n(?:  #   - .*\n)+", text, re.M)
    assert block, "no commented signing_secrets block under upstream"
    uncommented = text.replace(block.group(0), re.sub(r"^  # ", "  ", block.group(0), flags=re.M))
    example = yaml.safe_load(uncommented)
    schema = json.loads((REPO / SCHEMA_FILE).read_text(encoding="utf-8"))
    jsonschema.validate(example, schema, cls=jsonschema.Draft202012Validator)
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    config = parse_config(example, env={
        "WEBHOOK_SIDECAR_SIGNING_SECRET": secret, "STRIPE_WEBHOOK_SECRET": "whsec_example",
        "ACME_WEBHOOK_SECRET": "acme-example", "GITHUB_WEBHOOK_SECRET": "github-example"})
    keyring = Keyring(config.providers, config.upstream.signing_secrets)
    assert keyring.signing_keys() == (base64.b64decode(secret.removeprefix("whsec_")),)
