"""Twilio (providers.md §1.6, vectors §3.4/§3.5): ``X-Twilio-Signature`` is the base64
HMAC of the full URL Twilio requested followed by every POST parameter, sorted by name (then
value), as ``name`` ‖ ``value`` with no separators.

- The URL is the *public* one (``url`` in config) plus the request's query string: behind a
  proxy the request's own URL is not the one Twilio signed.
- JSON bodies are not parameters: Twilio adds ``bodySHA256=<hex sha256(body)>`` to the query
  and signs the URL alone; the body hash is checked here.
- HMAC-SHA1 with the Auth Token, or HMAC-SHA256 when
  ``X-Twilio-Webhooks-Signature-Settings`` says ``algorithm=HMAC_SHA256`` (SharedKey). Pin one
  with ``algorithm:`` to refuse the other.
- Like twilio-python, the URL is tried with and without the default port, because Twilio's
  own signing is inconsistent about it; and repeated identical parameters count once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qs, parse_qsl, urlsplit, urlunsplit

from sidecar.core.errors import VerificationError
from sidecar.core.fields import check_keys, get_choice, parse_public_url
from sidecar.core.headers import header_value
from sidecar.core.signing.delivery import Delivery, SignedDelivery
from sidecar.core.signing.plugins.base import parse_plugin_secret
from sidecar.core.signing.spec import SecretSpec

SIGNATURE_HEADER = "X-Twilio-Signature"
SETTINGS_HEADER = "X-Twilio-Webhooks-Signature-Settings"
_DIGESTS = {"HMAC_SHA1": "sha1", "HMAC_SHA256": "sha256"}
_PINNED = {"hmac-sha1": "sha1", "hmac-sha256": "sha256"}


def _settings_algorithm(value: str | None) -> str:
    """The algorithm named in the settings header; absent or empty means HMAC_SHA1."""
    for part in (value or "").split(","):
        name, found, text = part.partition("=")
        if found and name.strip() == "algorithm" and text.strip():
            return text.strip().upper()
    return "HMAC_SHA1"


def _port_variants(url: str) -> tuple[str, ...]:
    """The URL without its port and with it (the default port added when absent)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    try:
        port = parts.port
    except ValueError:
        return (url,)
    if port is not None:
        bare = netloc[: netloc.rfind(":")]
        with_port = netloc
    else:
        bare = netloc
        with_port = f"{netloc}:{443 if parts.scheme == 'https' else 80}"
    return (urlunsplit(parts._replace(netloc=bare)), urlunsplit(parts._replace(netloc=with_port)))


def _payload(url: str, params: Sequence[tuple[str, str]]) -> bytes:
    grouped: dict[str, set[str]] = {}
    for name, value in params:
        grouped.setdefault(name, set()).add(value)
    text = url + "".join(
        name + value for name in sorted(grouped) for value in sorted(grouped[name])
    )
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise VerificationError("malformed_url", "request URL unusable") from None


@dataclass(frozen=True, slots=True)
class TwilioScheme:
    url: str
    algorithm: str  # auto | hmac-sha1 | hmac-sha256
    secret: SecretSpec

    def full_url(self, query: str) -> str:
        if not query:
            return self.url
        return f"{self.url}{'&' if '?' in self.url else '?'}{query}"

    def _digest(self, headers: Mapping[str, str]) -> str:
        if self.algorithm != "auto":
            return _PINNED[self.algorithm]
        name = _settings_algorithm(header_value(headers, SETTINGS_HEADER))
        if name not in _DIGESTS:
            raise VerificationError("unsupported_algorithm", "unknown Twilio signature algorithm")
        return _DIGESTS[name]

    def _params(self, delivery: Delivery, url: str) -> list[tuple[str, str]]:
        """The signed parameters; for a JSON body (``bodySHA256`` in the query) none, after
        checking the body hash."""
        query = parse_qs(urlsplit(url).query)
        if "bodySHA256" in query:
            expected = hashlib.sha256(delivery.body).hexdigest().encode("ascii")
            given = query["bodySHA256"][0].encode("utf-8", "replace")
            if not hmac.compare_digest(expected, given):
                raise VerificationError("bad_signature", "body does not match bodySHA256")
            return []
        if not delivery.body:
            return []
        try:
            return parse_qsl(delivery.body.decode("utf-8"), keep_blank_values=True)
        except (UnicodeDecodeError, ValueError):
            raise VerificationError("malformed_body", "body is not form-encoded") from None

    def verify(self, keys: Sequence[bytes], delivery: Delivery, now: float) -> None:
        raw = header_value(delivery.headers, SIGNATURE_HEADER)
        if raw is None or not raw.strip():
            raise VerificationError("missing_signature", f"no {SIGNATURE_HEADER} header")
        try:
            candidate = base64.b64decode(raw.strip().encode("ascii"), validate=True)
        except (ValueError, binascii.Error):
            raise VerificationError("malformed_signature", "not base64") from None
        digest = self._digest(delivery.headers)
        url = self.full_url(delivery.query)
        params = self._params(delivery, url)
        payloads = [_payload(variant, params) for variant in _port_variants(url)]
        matched = False
        for key in keys:
            for payload in payloads:
                expected = hmac.new(key, payload, digest).digest()
                matched |= hmac.compare_digest(expected, candidate)
        if not matched:
            raise VerificationError("bad_signature")

    def sign(self, key: bytes, delivery: Delivery, now: float) -> SignedDelivery:
        try:
            digest = self._digest(delivery.headers)
            url = self.full_url(delivery.query)
            payload = _payload(url, self._params(delivery, url))
        except VerificationError as exc:
            raise ValueError(f"cannot sign: {exc.detail or exc.reason}") from None
        signature = base64.b64encode(hmac.new(key, payload, digest).digest()).decode("ascii")
        added = {SIGNATURE_HEADER: signature}
        if self.algorithm == "hmac-sha256":
            added[SETTINGS_HEADER] = "algorithm=HMAC_SHA256"
        return SignedDelivery(delivery.body, added)


def parse_twilio(data: Mapping[str, object], path: str) -> TwilioScheme:
    check_keys(data, path, required=("plugin", "url"), optional=("algorithm", "secret"),
               context=" for plugin twilio")
    algorithm = get_choice(data, "algorithm", path, ("auto", "hmac-sha1", "hmac-sha256"), "auto")
    secret = parse_plugin_secret(data, path, "utf8")
    return TwilioScheme(parse_public_url(data, "url", path), algorithm, secret)
