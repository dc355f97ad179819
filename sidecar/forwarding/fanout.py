"""Fan-out: a provider with destinations delivers each accepted event by queueing it once per
destination it was accepted for (``StoredRequest.destinations``), under the destination's key
(``stripe.billing``); each destination's own delivery workers forward it from there. The
provider's queue entry is then done, its recorded answer naming the destinations. An event
accepted before the provider had destinations (for its one app) goes to those it has now
that admit it, rather than to none.

A try that fails part-way (the store unreachable) is tried again like any queued event: an
enqueue finds the entry another try wrote, so each destination gets the event once. See
"Fan-out" in docs/design.md.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Final

from sidecar.config.model import ProviderConfig, route_key
from sidecar.core.body import Body
from sidecar.core.errors import StoreError
from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse, StoredRequest
from sidecar.core.ports import DeliveryStore
from sidecar.delivery.filtering import destinations_admitting
from sidecar.delivery.queue import order_key_of
from sidecar.forwarding.forwarder import Sent

JSON_HEADERS: Final = (("Content-Type", "application/json"),)


class FanOut:
    """What a fanning-out provider's queue worker sends with: ``send`` has the forwarder's
    signature, so the worker's takes, retries and settles are those of any queue."""

    def __init__(self, store: DeliveryStore, wake: Callable[[str], None]) -> None:
        self._store = store
        self._wake = wake  # this process's workers of a destination: new work

    async def send(self, provider: ProviderConfig, ids: Sequence[str], attempt: int,
                   request: StoredRequest) -> Sent:
        started = time.monotonic()
        [event_id] = ids
        body = Body(request.body)
        names = request.destinations
        if names is None:  # accepted before the provider had destinations: its current ones
            names = destinations_admitting(provider, body, dict(request.headers))
        copy = replace(request, destinations=None)
        order_key = order_key_of(provider, body)
        # Together, so that the store may write them in one statement (``store.coalesce``);
        # one key's order holds: its events' fan-outs are taken one at a time.
        enqueued = await asyncio.gather(*(
            self._store.enqueue(route_key(provider.key, name), event_id, body.sha256, copy,
                                order_key=order_key) for name in names), return_exceptions=True)
        failed = next((e for e in enqueued if isinstance(e, BaseException)), None)
        if isinstance(failed, StoreError):  # not all queued: the event stays ours, tried again
            elapsed_ms = (time.monotonic() - started) * 1000
            return Sent(AttemptResult(EventState.FAILED, Outcome.CONNECT_ERROR, None, elapsed_ms),
                        None, f"queueing for the destinations failed: {failed}")
        if failed is not None:
            raise failed
        for name in names:
            self._wake(route_key(provider.key, name))
        response = RecordedResponse(200, JSON_HEADERS,
                                    json.dumps({"destinations": list(names)}).encode())
        elapsed_ms = (time.monotonic() - started) * 1000
        return Sent(AttemptResult(EventState.DONE, Outcome.RESPONSE, response, elapsed_ms),
                    response, None)
