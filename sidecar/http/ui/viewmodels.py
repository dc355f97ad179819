"""What the inspector's pages show, made from what the store and the operator's verbs answer:
plain values in, the templates' values out (no request, no I/O).

An event page shows the stored request and the recorded response with secrets masked, a JSON
body pretty-printed, any other body only by its size and content type (a form or a text body
may hold credentials under names the masking cannot see); and every attempt, those without a
record included."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from sidecar.config.model import Config, Mode
from sidecar.core.events import QueueStats
from sidecar.http.ui.masking import Masker
from sidecar.http.ui.overview import Rates
from sidecar.http.ui.paths import PREFIX, event_path
from sidecar.ops import listing
from sidecar.ops import providers as provider_ops

# The events page's filters, as the query string names them.
FILTERS = ("provider", "state", "since", "until", "id_prefix", "status", "outcome", "limit")

NO_RESULT = ("not recorded (the lease ran out, the process stopped, or it predates the "
             "attempts timeline)")
IN_FLIGHT = "in flight now — its lease is live"


def events_page(query: Mapping[str, str], page: Mapping[str, Any],
                providers: Sequence[str]) -> dict[str, Any]:
    """The events page: ``page`` is ``ops.events.list_page``'s answer to ``query``. The link
    to older events keeps the filters that were set and adds the next page's cursor."""
    filters = {name: query.get(name, "") for name in FILTERS}
    older = None
    if page["next"] is not None:
        kept = {name: value for name, value in filters.items() if value}
        older = PREFIX + "?" + urlencode({**kept, "cursor": page["next"]})
    return {"events": page["events"], "filters": filters, "providers": providers,
            "states": listing.STATES, "status_classes": listing.STATUS_CLASSES,
            "outcomes": listing.OUTCOMES, "older": older, "paged": "cursor" in query,
            "default_limit": listing.PAGE_LIMIT}


def event_page(config: Config, masker: Masker, provider: str, event_id: str,
               event: Mapping[str, Any]) -> dict[str, Any]:
    """The page of the event at ``provider``/``event_id`` (as its URL names it): ``event`` is
    ``ops.events.show``'s answer. The actions it offers follow the verbs' rules (a verb still
    refuses what it must)."""
    state = event["state"]
    route = config.route(provider)
    queue_mode = route is not None and route.mode is Mode.QUEUE
    origin = event.get("fanned_out_from")
    return {
        "event": event, "timeline": timeline(event),
        "request_view": request_view(masker, event.get("request")),
        "response_view": response_view(masker, event),
        "can_redrive": (state == "dead" and queue_mode) or state == "failed"
        or (state == "processing" and not event["lease_live"] and not queue_mode),
        "can_release": state == "failed" and event["queue"] is None,
        "base": event_path(provider, event_id),
        "destinations": destinations_view(event.get("destinations"), event_id),
        "origin": ({**origin, "path": event_path(origin["provider"], event_id)}
                   if origin is not None else None),
    }


def destinations_view(destinations: Sequence[Mapping[str, Any]] | None,
                      event_id: str) -> list[dict[str, Any]] | None:
    """A fanning-out provider's event: per destination its name, its own event page, and its
    row (None until queued there) with its attempts timeline. None for any other event."""
    if destinations is None:
        return None
    return [{"name": d["destination"], "key": d["provider"],
             "path": event_path(d["provider"], event_id), "event": d["event"],
             "timeline": timeline(d["event"]) if d["event"] is not None else []}
            for d in destinations]


def overview_page(config: Config, holds: Sequence[Mapping[str, Any]],
                  stuck: Mapping[str, int], queues: Mapping[str, QueueStats],
                  rates: Rates) -> dict[str, Any]:
    """The overview: one row per configured queue, in the config's order, each provider's
    destinations after it (``stripe.billing``). ``holds`` is ``ops.providers.status``'s answer
    (that order too), ``stuck`` and ``queues`` the store's counts by provider."""
    rows = []
    for provider, hold in zip(config.routes, holds, strict=True):
        key = provider.key
        queue = queues.get(key)
        rows.append({
            "hold": hold, "needs_force": provider_ops.refuses_pause(provider) is not None,
            "provider": key, "mode": provider.mode.value,
            "counts": rates.counts.get(key), "stuck": stuck.get(key, 0),
            "depth": queue.pending if queue else 0,
            "oldest": queue.oldest_pending_seconds if queue else 0.0,
            "dead": queue.dead if queue else 0,
            "queue_mode": provider.mode is Mode.QUEUE,
            "destinations": [d.name for d in provider.destinations],
            "destination_of": provider.provider_key if provider.destination else None,
        })
    return {"rows": rows, "per_minute": rates.per_minute}


def request_view(masker: Masker, stored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if stored is None:
        return None
    headers = masker.headers(stored["headers"])
    return {"method": stored["method"], "path": masker.path(stored["path"]),
            "headers": headers,
            **_body(masker, headers, stored["body_text"], stored["body_base64"])}


def response_view(masker: Masker, event: Mapping[str, Any]) -> dict[str, Any] | None:
    if event.get("response_status") is None:
        return None
    headers = masker.headers(event.get("response_headers") or [])
    return {"status": event["response_status"], "headers": headers,
            **_body(masker, headers, event.get("response_body_text"),
                    event.get("response_body_base64"))}


def _body(masker: Masker, headers: list[tuple[str, str]], text: str | None,
          b64: str | None) -> dict[str, Any]:
    """``json``: the body pretty-printed and masked, or None; ``size`` in bytes and the
    ``content_type`` for any other body. ``text`` is None when the body is not UTF-8."""
    content_type = next((value for name, value in headers if name.lower() == "content-type"),
                        None)
    size = (len(text.encode("utf-8")) if text is not None else len(b64 or "") * 3 // 4
            - (b64 or "").count("=", -2))
    return {"json": masker.json_text(text) if text else None, "size": size,
            "content_type": content_type}


def timeline(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``event`` is ``ops.events.show()``'s answer. Each entry has ``attempt`` and either the
    recorded attempt's fields (``recorded`` True) or a ``note`` (no record: its process never
    wrote a result, or it was made by a version that kept no attempts). Ordered by attempt
    number, recorded attempts of one number (queue mode may repeat a number when a try did not
    reach the app) in the order they finished."""
    recorded = sorted(event.get("attempts") or [],
                      key=lambda a: (a["attempt"], a["finished_at"]))
    numbers = {a["attempt"] for a in recorded}
    entries: list[dict[str, Any]] = [{**a, "recorded": True} for a in recorded]
    current = int(event["attempt"])
    for number in range(1, current + 1):
        if number in numbers:
            continue
        live = number == current and event["state"] == "processing" and event["lease_live"]
        entries.append({"attempt": number, "recorded": False,
                        "note": IN_FLIGHT if live else NO_RESULT})
    entries.sort(key=lambda e: (e["attempt"], not e["recorded"], e.get("finished_at") or 0.0))
    return entries
