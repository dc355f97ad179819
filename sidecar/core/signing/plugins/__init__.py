"""Named signature plugins: ``signature: {plugin: NAME, ...}`` (see ``base.py`` for the
interface). Adding one is a module and a line in ``PLUGINS``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sidecar.core.fields import get_choice
from sidecar.core.signing.plugins.adyen_items import AdyenScheme, parse_adyen
from sidecar.core.signing.plugins.base import PluginScheme, PluginSpec
from sidecar.core.signing.plugins.mailgun_token import MailgunScheme, parse_mailgun
from sidecar.core.signing.plugins.twilio_form import TwilioScheme, parse_twilio

PLUGINS: dict[str, Callable[[Mapping[str, object], str], PluginScheme]] = {
    "twilio": parse_twilio,
    "adyen": parse_adyen,
    "mailgun": parse_mailgun,
}


def parse_plugin_spec(data: Mapping[str, object], path: str) -> PluginSpec:
    name = get_choice(data, "plugin", path, PLUGINS, None)
    return PluginSpec(name, PLUGINS[name](data, path))


__all__ = [
    "PLUGINS",
    "AdyenScheme",
    "MailgunScheme",
    "PluginScheme",
    "PluginSpec",
    "TwilioScheme",
    "parse_plugin_spec",
]
