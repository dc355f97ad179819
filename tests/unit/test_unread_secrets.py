"""A configuration loaded without its secrets (``Secrets.NONE`` or ``SIGNING``, as the
``events`` commands load it) knows so, and nothing serves it: its forwards would go out unsigned,
its admin API without a token, its deliveries verified against no key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sidecar.config.loader import Secrets, parse_config
from sidecar.core.errors import ConfigError
from sidecar.runtime.serve import start
from sidecar.runtime.wiring import build_apps
from sidecar.runtime.workers import ConfigFile, supervise


def data(**top: Any) -> dict[str, Any]:
    return {
        "listen": "127.0.0.1:0",
        "admin_listen": "127.0.0.1:0",
        "admin_token": "an-admin-token-of-some-length",
        "upstream": {"url": "http://127.0.0.1:3000",
                     "signing_secrets": ["whsec_" + "A" * 32]},
        "providers": {"stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                                 "secrets": ["whsec_abc"]}},
        **top,
    }


@pytest.mark.parametrize("secrets", [Secrets.NONE, Secrets.SIGNING])
def test_a_config_loaded_without_its_secrets_is_not_served(secrets: Secrets) -> None:
    config = parse_config(data(), env={}, secrets=secrets)
    with pytest.raises(ConfigError, match="loaded without its secrets") as info:
        build_apps(config)
    assert "providers.<key>.secrets" in str(info.value)
    with pytest.raises(ConfigError, match="loaded without its secrets"):
        asyncio.run(start(config))
    grouped = parse_config(data(workers=2), env={}, secrets=secrets)
    with pytest.raises(ConfigError, match="loaded without its secrets"):
        asyncio.run(supervise(grouped, ConfigFile("", "config.yaml", ".")))


def test_a_config_loaded_with_its_secrets_is_served() -> None:
    config = parse_config(data(), env={})
    apps = build_apps(config)
    assert apps.proxy is not None
