"""The body-replay guard: for providers whose event id is not covered by their signature.

GitHub signs the body but not ``X-GitHub-Delivery``. Anyone holding one captured delivery can
resend the identical, validly signed body under a fresh id, and deduplication — keyed by the
id — would forward it as a new event. The guard binds each verified body (by SHA-256) to the
first event id seen with it, for the provider's retention; the same body under another id is
then refused as ``replayed_body``. A provider's own retry keeps its id, so it passes.

Where the id is signed (a body field such as Stripe's ``$.id``, or a header inside the signed
message such as Standard Webhooks' ``webhook-id``) a new id would break the signature, so the
guard adds nothing there and is off by default.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

from sidecar.core.eventid import EventIdSpec
from sidecar.core.signing import DeclarativeSpec, SignatureSpec

KEY_PREFIX: Final = "body:"  # guard entries share the nonce table with signature nonces


def unsigned_id_headers(signature: SignatureSpec, event_id: EventIdSpec) -> tuple[str, ...]:
    """The headers the event id is read from that the signature does not cover (none: the id
    cannot change without breaking the signature). Ids from the body count as signed: every
    declarative message signs ``{body}``. Plugins sign no id header."""
    names = [*event_id.headers, *(n for part in event_id.composite
                                  for n in (part.header, *part.alternative_headers)
                                  if n is not None)]
    if not isinstance(signature, DeclarativeSpec):
        return tuple(names)
    signed = {part.name.lower() for part in signature.message.parts if part.kind == "header"}
    return tuple(name for name in names if name.lower() not in signed)


def guard_key(body_sha256: bytes) -> str:
    """The guard's entry for one body, in the store's nonce table."""
    return KEY_PREFIX + body_sha256.hex()


def ids_digest(event_ids: Sequence[str]) -> bytes:
    """What a body is bound to: the event id (or a batch's ids) it was first seen with."""
    return hashlib.sha256("\n".join(event_ids).encode("utf-8", "surrogatepass")).digest()
