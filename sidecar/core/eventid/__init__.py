"""The provider's stable event id: from a header, a small JSON-path subset of the body, a
composite of several of those, or one per item of a batch body. ``spec`` parses the
``event_id:`` block; ``extract`` reads a verified delivery by it."""

from sidecar.core.eventid.extract import BatchItem, batch_items, delivery_items, extract_event_id
from sidecar.core.eventid.spec import BatchSpec, EventIdSpec, IdPart, parse_event_id_spec

__all__ = [
    "BatchItem",
    "BatchSpec",
    "EventIdSpec",
    "IdPart",
    "batch_items",
    "delivery_items",
    "extract_event_id",
    "parse_event_id_spec",
]
