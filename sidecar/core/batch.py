"""Batch deliveries (SendGrid, HubSpot, Adyen: several events in one signed request).

Policy (see docs/providers.md, "Batches"): every item's event id is claimed on its own. The
app receives one request per delivery carrying only the items this delivery claimed; when it
claimed every item, that is the original body byte for byte, otherwise the same envelope
re-serialised with the other items left out. An item already done is never sent again, so a
retry that regroups events into new batches does not apply any event twice.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Collection, Sequence
from typing import Any

from sidecar.core.answers import Answer, Result
from sidecar.core.body import Body
from sidecar.core.eventid import BatchItem, EventIdSpec


def item_digest(item: BatchItem) -> bytes:
    """A body hash per item (canonical JSON), for the payload-mismatch check: the batch body
    itself legitimately differs when a provider regroups events."""
    canonical = json.dumps(item.value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


def claim_digest(spec: EventIdSpec, body: Body, item: BatchItem) -> bytes:
    """What the payload-mismatch check compares for one claimed event: the whole body's hash
    for a single event, the item's own for a batch item."""
    return item_digest(item) if spec.is_batch else body.sha256


def filtered_body(spec: EventIdSpec, body: Body | bytes, keep: Collection[int],
                  items: Sequence[BatchItem]) -> bytes:
    """The delivery's body carrying only the array elements at positions ``keep``. The
    original bytes when every item is kept (so an ordinary first delivery stays untouched)."""
    assert spec.batch is not None
    body = Body.of(body)
    if set(keep) >= {item.position for item in items}:
        return body.raw
    document: Any = copy.deepcopy(body.json())  # the parsed body is shared with other readers
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


def batch_answer(forwarded: Answer | None, settled: Sequence[Answer]) -> Answer:
    """One answer for a delivery whose events (one, or a batch's items) were partly forwarded
    by it (``forwarded``, the app's answer) and partly settled by other deliveries' rows.

    The provider may only hear 2xx when every event it carried is done: if ours were done but
    another item is still in flight or failed elsewhere, it gets that item's answer and
    retries (our items are then duplicates). A failed forward is answered as such. Items the
    filter dropped are done (``Result.FILTERED``)."""
    unfinished = [answer for answer in settled
                  if answer.result is not Result.DUPLICATE and answer.result is not Result.FILTERED]
    if forwarded is not None and (not unfinished or forwarded.status >= 300):
        return forwarded
    if unfinished:
        return unfinished[0]
    return settled[0]  # every event was already done: replay one
