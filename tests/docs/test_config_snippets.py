"""Every config file, or part of one, that a page shows is accepted by the real loader.

A YAML block is taken for config when its top-level keys are all config keys, or when it is a
provider's entry (a key whose value has a `path`), as docs/providers.md shows them (chart values,
Compose files and app charts have others; docs/kubernetes.md's values are rendered by the chart
in tests/deploy/test_install_order.py). A part of a config is laid over a small complete one
first: its providers replace the base's, its other keys are merged in. `${VAR}` and `{env: …}`
get a valid secret, `{file: …}` a file holding one."""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sidecar.config.blocks import TOP
from sidecar.config.loader import parse_config
from sidecar.config.problems import ConfigProblems
from tests.deploy.chart_support import SIGNING_SECRET
from tests.support import REPO

PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
# A value for every kind of secret the presets take: Standard Webhooks, hex (an HMAC key, an
# Ed25519 public key), base64 (an ECDSA public key, in DER).
SECRETS = [
    SIGNING_SECRET,
    "ab" * 32,
    base64.b64encode(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode(),
]
BASE: dict[str, Any] = {
    "upstream": {"url": "http://127.0.0.1:3000"},
    "providers": {"base": {"path": "/webhooks/base", "preset": "standard-webhooks",
                           "secrets": [SIGNING_SECRET]}},
}


def config_blocks(page: Path) -> list[tuple[int, Any]]:
    found = []
    text = page.read_text(encoding="utf-8")
    for match in re.finditer(r"^```yaml\n(.*?)^```$", text, re.M | re.S):
        try:
            data = yaml.safe_load(match.group(1))
        except yaml.YAMLError:
            continue  # a Helm template, not YAML
        if not isinstance(data, dict):
            continue
        if all(isinstance(v, dict) and "path" in v for v in data.values()):
            data = {"providers": data}  # a provider's entry, as providers.md shows each
        if data.keys() <= TOP.keys.keys():
            found.append((text.count("\n", 0, match.start()) + 1, data))
    return found


CASES = [pytest.param(data, id=f"{page.name}:{line}")
         for page in PAGES for line, data in config_blocks(page)]


def completed(part: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict) and key != "providers":
            config[key] = {**config[key], **value}
        else:
            config[key] = copy.deepcopy(value)
    return config


def with_secret_files(config: dict[str, Any], root: Path) -> dict[str, Any]:
    for provider in config["providers"].values():
        for ref in provider.get("secrets", []):
            if isinstance(ref, dict) and "file" in ref:
                local = root / Path(ref["file"]).name
                local.write_text(SIGNING_SECRET)
                ref["file"] = str(local)
    return config


def test_the_pages_show_config() -> None:
    assert len(CASES) >= 10, [c.id for c in CASES]


@pytest.mark.parametrize("part", CASES)
def test_each_config_a_page_shows_loads(part: dict[str, Any], tmp_path: Path) -> None:
    config = with_secret_files(completed(part), tmp_path)
    text = yaml.safe_dump(config)
    names = re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text) + re.findall(
        r"env: ([A-Za-z_][A-Za-z0-9_]*)", text)
    problems: list[ConfigProblems] = []
    for secret in SECRETS:  # each scheme's secret has a form of its own: one of these fits
        env = {name: "https://hooks.example.com" if name.endswith("URL") else secret
               for name in names}
        try:
            parse_config(config, env=env, base_dir=tmp_path)
            return
        except ConfigProblems as exc:
            problems.append(exc)
    raise problems[0]
