"""What the inspector never shows: signature values, credentials and cookies, in stored request
headers, recorded response headers and JSON bodies (Mailgun signs in the body)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from sidecar.config.model import Config
from sidecar.core.signing.spec import DeclarativeSpec

MASK = "••••••"

# Names that carry a credential or a signature whatever the provider: exact names, then any
# name containing one of the fragments (x-hub-signature-256, x-shopify-hmac-sha256, …).
_GENERIC_NAMES = frozenset({
    "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key",
    "x-auth-token", "x-access-token", "x-csrf-token", "x-gitlab-token", "x-webhook-token",
})
_FRAGMENTS = re.compile(r"signature|hmac|secret|password|passwd|token|api[-_]?key|credential",
                        re.IGNORECASE)


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
        return lowered in self._names or _FRAGMENTS.search(lowered) is not None

    def headers(self, pairs: Iterable[Iterable[str]]) -> list[tuple[str, str]]:
        """Header pairs with sensitive values replaced by ``MASK``."""
        masked = []
        for name, value in pairs:
            masked.append((name, MASK if self.sensitive(name) else value))
        return masked

    def json_text(self, body: str) -> str | None:
        """A JSON body pretty-printed with sensitive members' values masked, or None when the
        body is not JSON."""
        try:
            document = json.loads(body)
        except ValueError:
            return None
        return json.dumps(self._masked(document), indent=2, ensure_ascii=False)

    def _masked(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: MASK if self.sensitive(str(key)) and not isinstance(item, dict | list)
                    else self._masked(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._masked(item) for item in value]
        return value
