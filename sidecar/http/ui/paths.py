"""The inspector's URLs: how pages spell an event's path, which spelling a form's CSRF token is
bound to, and where a login may send the browser back to."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

PREFIX = "/ui/"


def urlpart(value: object) -> str:
    """One path segment or query value, percent-encoded (``/`` included). Bytes that were not
    UTF-8 (kept as lone surrogates) are encoded as those bytes, never an error."""
    return quote(str(value).encode("utf-8", "surrogateescape"), safe="")


def event_path(provider: str, event_id: str) -> str:
    return f"{PREFIX}events/{urlpart(provider)}/{urlpart(event_id)}"


def form_action(request: web.Request) -> str:
    """The path the form behind this POST posts to, spelt as the pages spell it (each part
    ``urlpart``, like ``event_path``), whatever spelling the browser sent: the CSRF token is
    bound to this one spelling on both sides. ``request.path`` would be the decoded path, which
    differs for an id with ':', a space, '%' or non-ASCII."""
    resource = request.match_info.route.resource
    if resource is None:
        return request.path
    parts = {name: urlpart(value) for name, value in request.match_info.items()}
    return resource.canonical.format(**parts)


def event_key(request: web.Request) -> tuple[str, str]:
    return request.match_info["provider"], request.match_info["event_id"]


def local(target: str | None) -> str:
    """Where a login goes back to: an inspector path on this listener, never another site
    (``//host`` or ``/ui/../`` tricks included)."""
    if target is None or not target.startswith(PREFIX) or "//" in target or "\\" in target \
            or ".." in target:
        return PREFIX
    return target
