"""What the inspector never shows: signature values, credentials and cookies, in stored request
headers, the request's query string, recorded response headers and JSON bodies (Mailgun signs in
the body). Names stay visible; only values are masked.

Masking keeps secrets off screens and screenshots; it is not access control. Whoever may see
the inspector holds the admin token (or a shell on the host), and the admin API gives that same
person every stored request as received (``GET /admin/events/{provider}/{event_id}``): so
reads of stored payloads are logged, in both places, like actions."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote_plus

from sidecar.config.model import Config
from sidecar.core.signing.spec import DeclarativeSpec

MASK = "••••••"

# Names that carry a credential or a signature whatever the provider: exact names, then any
# name containing one of the fragments (x-hub-signature-256, x-shopify-hmac-sha256, …).
_GENERIC_NAMES = frozenset({
    "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key",
    "x-auth-token", "x-access-token", "x-csrf-token", "x-gitlab-token", "x-webhook-token",
})
_FRAGMENTS = re.compile(r"signature|hmac|secret|password|passwd|token|api[-_]?key|credential"
                        # "key" or "sig" as one part of a longer name: Ocp-Apim-Subscription-Key,
                        # private_key, webhook_key, Paypal-Transmission-Sig (alone, they are
                        # masked in query strings only: a JSON "key" is often an issue's name).
                        r"|[-_.](?:key|sig)(?:$|[-_.])|^(?:key|sig)[-_.]",
                        re.IGNORECASE)
# Names the fragments match that identify rather than authenticate: shown.
_SHOWN = re.compile(r"^(?:x-)?idempotency[-_]", re.IGNORECASE)
# Query parameters carry credentials under shorter names too (?key=…, ?sig=…, ?code=… in an
# OAuth redirect, ?auth=…, ?pass=…): these, as well as every name above.
_QUERY_NAMES = frozenset({"key", "sig", "sign", "code", "pass", "pwd", "auth", "apikey", "jwt",
                          "session", "sid"})
_QUERY_FRAGMENTS = re.compile(r"auth|pass", re.IGNORECASE)


class Masker:
    """Masks by the configured providers' signature and timestamp-less header names, plus
    the generic list. Built once per config."""

    def __init__(self, config: Config) -> None:
        names = set(_GENERIC_NAMES)
        for provider in config.providers:
            if isinstance(provider.signature, DeclarativeSpec):
                names.update(name.lower() for name in provider.signature.headers)
        self._names = frozenset(names)

    def sensitive(self, name: str) -> bool:
        lowered = name.lower()
        return lowered in self._names or (_FRAGMENTS.search(lowered) is not None
                                          and _SHOWN.search(lowered) is None)

    def headers(self, pairs: Iterable[Iterable[str]]) -> list[tuple[str, str]]:
        """Header pairs with sensitive values replaced by ``MASK``."""
        masked = []
        for name, value in pairs:
            masked.append((name, MASK if self.sensitive(name) else value))
        return masked

    def path(self, path_qs: str) -> str:
        """A stored request path with the values of sensitive query parameters masked, their
        names and every other parameter kept as received."""
        path, mark, query = path_qs.partition("?")
        if not mark:
            return path_qs
        items = []
        for item in query.split("&"):
            name, equals, _ = item.partition("=")
            items.append(f"{name}={MASK}" if equals and self._query_sensitive(name) else item)
        return f"{path}?{'&'.join(items)}"

    def _query_sensitive(self, raw_name: str) -> bool:
        name = unquote_plus(raw_name)
        return (self.sensitive(name) or name.lower() in _QUERY_NAMES
                or _QUERY_FRAGMENTS.search(name) is not None)

    def json_text(self, body: str) -> str | None:
        """A JSON body pretty-printed with sensitive members' values masked (a sensitive
        member's object or array keeps its shape, every scalar in it masked), or None when the
        body is not JSON."""
        try:
            document = json.loads(body)
        except ValueError:
            return None
        return json.dumps(self._masked(document), indent=2, ensure_ascii=False)

    def _masked(self, value: Any, hidden: bool = False) -> Any:
        """``hidden``: ``value`` is under a sensitive name, however deep."""
        if isinstance(value, dict):
            return {key: self._masked(item, hidden or self.sensitive(str(key)))
                    for key, item in value.items()}
        if isinstance(value, list):
            return [self._masked(item, hidden) for item in value]
        return MASK if hidden else value
