"""Batch deliveries (SendGrid, HubSpot, Adyen: several events in one signed request).

Policy (see docs/providers.md, "Batches"): every item's event id is claimed on its own. The
app receives one request per delivery carrying only the items this delivery claimed; when it
claimed every item, that is the original body byte for byte, otherwise the same envelope
re-serialised with the other items left out. An item already done is never sent again, so a
retry that regroups events into new batches does not apply any event twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence

from sidecar.core.eventid import BatchItem, EventIdSpec


def item_digest(item: BatchItem) -> bytes:
    """A body hash per item (canonical JSON), for the payload-mismatch check: the batch body
    itself legitimately differs when a provider regroups events."""
    canonical = json.dumps(item.value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


def filtered_body(spec: EventIdSpec, body: bytes, keep: Collection[int],
                  items: Sequence[BatchItem]) -> bytes:
    """The delivery's body carrying only the array elements at positions ``keep``. The
    original bytes when every item is kept (so an ordinary first delivery stays untouched)."""
    assert spec.batch is not None
    if set(keep) >= {item.position for item in items}:
        return body
    document = json.loads(body)
    array_path = spec.batch.array_path
    if array_path.steps:
        found, array = array_path.lookup(document)
        assert found and isinstance(array, list)
        array[:] = [element for i, element in enumerate(array) if i in keep]
    else:
        document = [element for i, element in enumerate(document) if i in keep]
    # ASCII escapes: always valid JSON bytes, even for items holding lone surrogate escapes.
    return json.dumps(document, separators=(",", ":")).encode()


def batch_key(provider: str, event_ids: Sequence[str]) -> str:
    """A stable ``Idempotency-Key`` for a forward that carries several events."""
    digest = hashlib.sha256("\n".join(sorted(event_ids)).encode()).hexdigest()[:32]
    return f"{provider}:batch:{digest}"
