"""The interface of a signature plugin: a scheme that data alone cannot describe (Twilio's
sorted form parameters, Adyen's per-item signatures, Mailgun's signature fields in the body).

A plugin is chosen by name (``signature: {plugin: twilio, ...}``), parses its own options, and
offers the same two entry points as the declarative engine, with the same contract: ``verify``
raises only ``VerificationError``; ``sign`` produces what the provider would send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sidecar.core.body import NotJson, parse_json
from sidecar.core.errors import VerificationError
from sidecar.core.fields import as_mapping, check_keys, get_choice, join_path
from sidecar.core.signing.delivery import Delivery, SignedDelivery
from sidecar.core.signing.encodings import SECRET_DECODERS
from sidecar.core.signing.spec import SecretSpec


class PluginScheme(Protocol):
    @property
    def secret(self) -> SecretSpec:
        """How a configured secret becomes key bytes."""
        ...

    def verify(self, keys: Sequence[bytes], delivery: Delivery, now: float) -> None:
        """Return if the delivery is authentic; else raise ``VerificationError``."""
        ...

    def sign(self, key: bytes, delivery: Delivery, now: float) -> SignedDelivery:
        """Sign as the provider would; ``ValueError`` when the delivery cannot be signed."""
        ...


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """A ``signature:`` block naming a plugin, with the options the plugin parsed."""

    plugin: str
    scheme: PluginScheme

    @property
    def secret(self) -> SecretSpec:
        return self.scheme.secret


def json_document(body: bytes) -> object:
    """The body as JSON for schemes whose signature lives in it; ``VerificationError`` if not
    JSON. (These schemes must read the body before verifying: there is nothing else to read.)"""
    try:
        return parse_json(body)
    except NotJson:
        raise VerificationError("malformed_body", "body is not JSON") from None


def parse_plugin_secret(data: Mapping[str, object], path: str, default: str) -> SecretSpec:
    """A plugin's optional ``secret: {encoding: ...}`` (only the encoding can be set)."""
    if data.get("secret") is None:
        return SecretSpec(encoding=default)
    where = join_path(path, "secret")
    mapping = as_mapping(data["secret"], where)
    check_keys(mapping, where, optional=("encoding",))
    return SecretSpec(encoding=get_choice(mapping, "encoding", where, SECRET_DECODERS, default))
