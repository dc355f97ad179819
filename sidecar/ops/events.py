"""Operator actions on event rows, shared by the CLI and the admin API: list, show, release a
stuck or failed event, re-drive a failed event from its stored payload, and re-queue dead
(dead-lettered) events of queue-mode providers for their delivery workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sidecar.config.model import Config, Mode, ProviderConfig, route_key
from sidecar.core.batch import filtered_body
from sidecar.core.errors import OperationError
from sidecar.core.eventid import batch_items
from sidecar.core.events import EventState, StoredRequest
from sidecar.core.listing import EventQuery
from sidecar.core.ports import OperatorStore
from sidecar.forwarding.forwarder import Forwarder
from sidecar.ops import listing
from sidecar.ops.describe import (
    describe,
    describe_attempt,
    describe_queue,
    describe_request,
)
from sidecar.ops.listing import has_nul
from sidecar.ops.listing import query_from as query_from  # where it was first
from sidecar.ops.routes import find_route, named_key, split_key


@dataclass(frozen=True, slots=True)
class RedriveResult:
    attempt: int
    state: str
    status: int | None  # the app's status, or None when it gave no answer
    outcome: str


@dataclass(frozen=True, slots=True)
class Requeued:
    """Dead events put back in their provider's queue, due now: the running proxies' delivery
    workers forward them (the CLI only writes the rows)."""

    provider: str
    event_ids: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {"provider": self.provider, "requeued": list(self.event_ids),
                "count": len(self.event_ids)}


# Dead events re-queued by one bulk re-drive unless told otherwise.
REDRIVE_LIMIT = 1000


async def list_page(store: OperatorStore, query: EventQuery, *,
                    gone: Callable[[], bool] | None = None) -> dict[str, Any]:
    """One page of events newest first: ``{"events": [describe(row)…], "next": cursor}``, the
    cursor to ask for the next (older) page with, or None at the end. At most
    ``CONCURRENT_LISTINGS`` pages are read from one store at a time; up to
    ``WAITING_LISTINGS`` more wait their turn (each within the store's deadline once it runs),
    and further ones are refused (``listing.ListingsBusy``). ``gone``: whether the client has
    left, looked at while waiting (``listing.ClientGone``)."""
    async with listing.turn(store, gone):
        page = await store.list_page(query)
    return {"events": [describe(row) for row in page.rows],
            "next": page.next.encode() if page.next is not None else None}


def listing_query(config: Config, params: Mapping[str, str], *,
                  now: float | None = None) -> EventQuery:
    """:func:`query_from` for this config: ``provider`` with ``destination`` names that
    destination's queue (``provider=stripe&destination=billing`` is ``provider=stripe.billing``);
    without ``provider`` every configured queue is listed, each destination's included."""
    destination = params.get("destination") or None
    if destination is not None:
        if not params.get("provider"):
            raise OperationError(400, "destination goes with provider (the provider whose "
                                      "destination it is)")
        params = {**params, "provider": named_key(config, params["provider"], destination)}
    return query_from(params, [route.key for route in config.routes], now=now)


def _require_key(provider: str, event_id: str) -> None:
    """A key naming no event any store can hold is answered 404 before the store is asked."""
    if has_nul(provider) or has_nul(event_id):
        raise OperationError(404, f"no event {provider!r}:{event_id!r}")


async def show(config: Config, store: OperatorStore, provider: str,
               event_id: str) -> dict[str, Any]:
    """One event: its row, recorded response, stored request, queue entry and attempts. Fan-out
    adds ``destinations`` (a fanning-out provider's event: each destination's row, see
    :func:`destination_rows`; else None) and ``fanned_out_from`` (a destination's event: its
    provider and destination name; else None)."""
    _require_key(provider, event_id)
    row = await store.get(provider, event_id)
    if row is None:
        raise OperationError(404, f"no event {provider}:{event_id}")
    data = describe(row, with_body=True)
    payload = await store.get_payload(provider, event_id)
    data["payload_stored"] = payload is not None
    data["request"] = describe_request(payload) if payload is not None else None
    data.update(await _details(store, provider, event_id, in_queue=row.in_queue))
    names = _destination_names(config, provider, payload)
    data["destinations"] = (await destination_rows(store, provider, event_id, names)
                            if names is not None else None)
    split = split_key(provider)
    data["fanned_out_from"] = ({"provider": split[0], "destination": split[1]}
                               if split is not None else None)
    return data


async def _details(store: OperatorStore, provider: str, event_id: str, *,
                   in_queue: bool) -> dict[str, Any]:
    entry = await store.queue_entry(provider, event_id) if in_queue else None
    return {"queue": describe_queue(entry) if entry is not None else None,
            "attempts": [describe_attempt(a) for a in await store.attempts(provider, event_id)]}


def _destination_names(config: Config, provider: str,
                       payload: StoredRequest | None) -> tuple[str, ...] | None:
    """The destinations a provider's event goes to: those fixed when it was accepted, or, with
    no stored request to say, the config's; None for a provider without destinations."""
    if payload is not None and payload.destinations is not None:
        return payload.destinations
    route = config.route(provider)
    if route is None or not route.fans_out:
        return None
    return tuple(d.name for d in route.destinations)


async def destination_rows(store: OperatorStore, provider: str, event_id: str,
                           names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each destination's copy of a provider's event, in ``names``' order: ``destination``,
    its key (``provider``) and ``event`` — its row (as :func:`describe`) with its queue entry
    and attempts, or None until the provider's queue worker has queued it there."""
    async def one(name: str) -> dict[str, Any]:
        key = route_key(provider, name)
        row = await store.get(key, event_id)
        event = None
        if row is not None:
            event = {**describe(row), **await _details(store, key, event_id,
                                                        in_queue=row.in_queue)}
        return {"destination": name, "provider": key, "event": event}

    return list(await asyncio.gather(*(one(name) for name in names)))  # read side by side


async def release(config: Config, store: OperatorStore, provider: str, event_id: str, *,
                  force: bool = False) -> dict[str, Any]:
    """Mark a ``failed`` event, or a ``processing`` one whose lease has expired (its process is
    gone), ``failed`` with no lease, so the next redelivery is forwarded. A ``processing`` event
    whose lease is still live is released only with ``force``: its attempt may still be running,
    and a redelivery would then reach the app a second time, concurrently. The store checks the
    lease in the statement that updates the row, so an attempt renewed in between is kept.
    An event in a queue (queue mode) is never released: its delivery workers own it.

    The answer is :func:`show`'s, with ``forced_live_lease`` true when a live attempt was
    released (the caller warns the operator)."""
    _require_key(provider, event_id)
    before = await store.get(provider, event_id) if force else None
    if not await store.release(provider, event_id, force=force):
        row = await store.get(provider, event_id)
        if row is None:
            raise OperationError(404, f"no event {provider}:{event_id}")
        if row.state is EventState.DEAD:
            raise OperationError(409, f"event {provider}:{event_id} is dead (queue mode): "
                                      "release does not apply; re-queue it with redrive")
        if row.in_queue:
            raise OperationError(
                409, f"event {provider}:{event_id} is {row.state.value} in its provider's "
                     "queue (queue mode): the delivery workers own it and release does not "
                     "apply (a crashed worker's lease expires and another worker takes it)")
        if row.state is EventState.PROCESSING:
            left = (row.lease_until or row.now) - row.now
            raise OperationError(
                409, f"event {provider}:{event_id} is processing under a live lease (attempt "
                     f"{row.attempt}, {left:.0f}s left): its attempt may still be running. "
                     "Wait for the lease to expire, or force the release once you know its "
                     "process is gone (CLI --force, admin API ?force=true); a redelivery "
                     "would otherwise reach the app twice at once")
        raise OperationError(409, f"event {provider}:{event_id} is {row.state.value}; only "
                                  "processing or failed events can be released")
    data = await show(config, store, provider, event_id)
    data["forced_live_lease"] = bool(
        before is not None and before.state is EventState.PROCESSING and before.lease_live)
    return data


async def redrive(config: Config, store: OperatorStore, forwarder: Forwarder, owner: str,
                  provider_key: str, event_id: str) -> RedriveResult | Requeued:
    """Re-drive one event. A ``dead`` event of a queue-mode provider goes back to its queue,
    due now, with a fresh budget (:class:`Requeued`): the running proxies' workers deliver it.
    A ``failed`` (or crashed) forward-mode event is forwarded again now from its stored
    request, as attempt + 1 (:class:`RedriveResult`)."""
    provider = _provider(config, provider_key)
    _require_key(provider_key, event_id)
    row = await store.get(provider_key, event_id)
    if row is None:
        raise OperationError(404, f"no event {provider_key}:{event_id}")
    if row.state is EventState.DEAD:
        _require_queue_mode(provider)
        requeued = await store.requeue_dead(provider_key, event_id)
        if not requeued:  # re-driven (or deleted by retention) since it was read
            raise OperationError(409, f"event {provider_key}:{event_id} is no longer dead")
        return Requeued(provider_key, tuple(requeued))
    if row.state is EventState.QUEUED:
        raise OperationError(409, f"event {provider_key}:{event_id} is queued: the delivery "
                                  "workers deliver it (events show gives when it is due); only "
                                  "dead events are re-queued")
    payload = await store.get_payload(provider_key, event_id)
    if payload is None:
        raise OperationError(409, f"no stored payload for {provider_key}:{event_id} "
                                  "(set store_payload: true on the provider to keep them)")
    attempt = await store.take_over(provider_key, event_id, provider.lease, owner)
    if attempt is None:
        row = await store.get(provider_key, event_id)
        state = row.state.value if row else "gone"
        raise OperationError(409, f"event {provider_key}:{event_id} is {state}; only failed "
                                  "events, expired attempts and dead (queue mode) events can "
                                  "be re-driven")
    if provider.event_id.is_batch:
        # The stored request is the batch that first carried this event: send only this item.
        items = batch_items(provider.event_id, payload.body, dict(payload.headers))
        payload = replace(payload, body=filtered_body(
            provider.event_id, payload.body,
            {i.position for i in items if i.event_id == event_id}, items))
    done = await forwarder.forward(provider, [(event_id, attempt)], payload)
    return RedriveResult(
        attempt=attempt, state=done.result.state.value,
        status=done.response.status if done.response else None,
        outcome=done.result.outcome.value,
    )


async def redrive_dead(config: Config, store: OperatorStore, provider_key: str, *,
                       older_than: float | None = None,
                       limit: int = REDRIVE_LIMIT) -> Requeued:
    """Re-queue up to ``limit`` dead events of a queue-mode provider (those received more than
    ``older_than`` seconds ago, when given), due now, each with a fresh budget."""
    _require_queue_mode(_provider(config, provider_key))
    if not 1 <= limit <= 10_000:
        raise OperationError(400, "limit must be between 1 and 10000")
    if older_than is not None and older_than < 0:
        raise OperationError(400, "older_than must not be negative")
    requeued = await store.requeue_dead(provider_key, older_than_seconds=older_than,
                                        limit=limit)
    return Requeued(provider_key, tuple(requeued))


def _provider(config: Config, key: str) -> ProviderConfig:
    return find_route(config, key)


def _require_queue_mode(provider: ProviderConfig) -> None:
    """Dead events are re-driven through the queue, which only a queue-mode provider's workers
    take from: re-queued under a forward-mode config they would wait for ever."""
    if provider.mode is not Mode.QUEUE:
        raise OperationError(
            409, f"provider {provider.key!r} is in {provider.mode.value} mode: its queue is not "
                 "delivered, so dead events are not re-queued (set mode: queue to deliver them)")
