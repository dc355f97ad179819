"""How ``webhook-sidecar send`` signs like a provider: the scheme (signature spec, signing key,
where the event id lives) from a preset or a config file's provider, and the headers a delivery
needs that were not given."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from sidecar.config.presets import load_preset
from sidecar.core.errors import ConfigError
from sidecar.core.eventid import EventIdSpec, delivery_items, parse_event_id_spec
from sidecar.core.headers import header_value
from sidecar.core.signing import (
    DeclarativeSpec,
    PluginSpec,
    SignatureSpec,
    decode_signing_key,
    parse_signature_spec,
)
from sidecar.core.signing.template import PartKind


@dataclass(frozen=True, slots=True)
class Scheme:
    """What ``send`` needs to sign like a provider: the signature spec, the signing key and
    where the event id lives (to generate one when it is a header nobody gave)."""

    signature: SignatureSpec
    key: bytes
    event_id: EventIdSpec | None
    form_body: bool = False
    preset: str | None = None


# The header naming the kind of event, for providers that send one beside the body, and a
# harmless value for a --file delivery (a provider's own test or ping event where it has one).
# Apps route on it; the proxy never reads it. A sample's own value, then --header, win.
EVENT_TYPE_HEADERS: Mapping[str, tuple[str, str]] = {
    "github": ("X-GitHub-Event", "ping"),
    "gitlab": ("X-Gitlab-Event", "System Hook"),
    "bitbucket": ("X-Event-Key", "repo:push"),
    "shopify": ("X-Shopify-Topic", "app/uninstalled"),
    "lemonsqueezy": ("X-Event-Name", "order_created"),
    "linear": ("Linear-Event", "Issue"),
    "twitch": ("Twitch-Eventsub-Message-Type", "notification"),
}


def _needs_url(data: Mapping[str, object]) -> bool:
    message = data.get("message")
    return data.get("plugin") == "twilio" or (isinstance(message, str) and "{url}" in message)


def scheme_from_preset(args: argparse.Namespace) -> Scheme:
    if not args.secret:
        raise ConfigError("--secret", "required with --preset")
    data = load_preset(args.preset)
    signature = data["signature"]
    assert isinstance(signature, dict)
    if _needs_url(signature):
        parts = urlsplit(args.url)
        signature["url"] = args.signed_url or urlunsplit(parts._replace(query="", fragment=""))
    spec = parse_signature_spec(signature, f"preset {args.preset}.signature")
    event_id = parse_event_id_spec(data["event_id"], f"preset {args.preset}.event_id")
    key = decode_signing_key(spec, args.secret, "--secret")
    return Scheme(spec, key, event_id, _is_form(spec), args.preset)


def scheme_from_config(args: argparse.Namespace) -> Scheme:
    from sidecar.config.loader import load_config_file

    if not args.provider:
        raise ConfigError("--provider", "required with --config")
    config = load_config_file(args.config)
    provider = next((p for p in config.providers if p.key == args.provider), None)
    if provider is None:
        known = ", ".join(p.key for p in config.providers)
        raise ConfigError("--provider", f"no provider {args.provider!r} in the config ({known})")
    if args.secret:
        key = decode_signing_key(provider.signature, args.secret, "--secret")
    else:
        key = provider.key_bytes[0]
        if isinstance(provider.signature, DeclarativeSpec) and (
            provider.signature.asymmetric_algorithm is not None
            and not provider.signature.has_symmetric
        ):
            raise ConfigError("--secret", f"provider {provider.key!r} verifies with public "
                              "keys: pass the private key to sign with")
    return Scheme(provider.signature, key, provider.event_id, _is_form(provider.signature),
                  provider.preset)


def _is_form(spec: SignatureSpec) -> bool:
    return isinstance(spec, PluginSpec) and spec.plugin == "twilio"


def generated_headers(scheme: Scheme, headers: dict[str, str], now: float) -> dict[str, str]:
    """Headers the scheme needs that were not given: an event id header (one id for every
    copy, so copies are redeliveries) and any other header the signature covers."""
    added: dict[str, str] = {}
    names: list[str] = []
    if scheme.event_id is not None and scheme.event_id.header is not None:
        names.append(scheme.event_id.header)
    spec = scheme.signature
    if isinstance(spec, DeclarativeSpec):
        names += [part.name for part in spec.message.parts if part.kind is PartKind.HEADER]
    event_type = EVENT_TYPE_HEADERS.get(scheme.preset or "")
    if event_type is not None and header_value(headers, event_type[0]) is None:
        added[event_type[0]] = event_type[1]
    for name in names:
        if header_value({**headers, **added}, name) is not None:
            continue
        if "timestamp" in name.lower():
            added[name] = str(int(now))
        elif name.lower() in ("webhook-id", "svix-id"):
            added[name] = f"msg_{uuid.uuid4().hex}"
        else:
            added[name] = str(uuid.uuid4())
    return added


def event_ids(scheme: Scheme, body: bytes, headers: Mapping[str, str]) -> list[str]:
    """The event ids the delivery carries, as the proxy will read them (one, or one per item
    of a batch); empty when the scheme declares none. Raises ``EventIdError`` when the proxy
    would find none (it would answer 400)."""
    if scheme.event_id is None:
        return []
    return [item.event_id for item in delivery_items(scheme.event_id, body, headers)]
