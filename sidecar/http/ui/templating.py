"""How the inspector's pages are rendered: Jinja2, autoescaped, and every value shown made
printable first, so that no stored byte can stop a page from being written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from sidecar.http.ui.auth import CSRF_FIELD, OPERATOR, Authenticator, Operator
from sidecar.http.ui.paths import urlpart

if TYPE_CHECKING:
    import jinja2

# What an action's redirect may announce: fixed texts, chosen by a code in the query string.
NOTICES = {
    "requeued": "Re-queued: the delivery workers take it now.",
    "forwarded": "Re-driven: forwarded to the app again (see the new attempt below).",
    "released": "Released: the next redelivery from the provider takes it over.",
    "bulk": "Dead events re-queued: {count}.",
    "logged_out": "Logged out.",
    "paused": "Paused: every replica stops delivering this provider within a second.",
    "resumed": "Resumed: every replica delivers this provider again within a second.",
}
# A re-queued count is at most 10 000 (the bulk re-drive's limit): more digits are not ours.
_COUNT_DIGITS = 9


class Renderer:
    """Pages from the templates. Every page is also given what the layout shows: the notice a
    redirect asked for, the operator (when the request was let in: ``auth.OPERATOR``), the
    CSRF tokens of its forms, and whether to offer a logout."""

    def __init__(self, auth: Authenticator) -> None:
        self._auth = auth
        self._env: jinja2.Environment | None = None  # made at the first page (``environment``)

    def page(self, request: web.Request, template: str, *, status: int = 200,
             **values: Any) -> web.Response:
        operator: Operator | None = request.get(OPERATOR)

        def csrf(action: str) -> str:
            assert operator is not None
            return self._auth.csrf(operator, action)

        if self._env is None:
            self._env = environment()
        html = self._env.get_template(template).render(
            operator=operator, csrf=csrf, csrf_field=CSRF_FIELD, notice=notice(request.query),
            logout=self._auth.needs_login and operator is not None, **values)
        return web.Response(text=html, status=status, content_type="text/html",
                            charset="utf-8")

    def problem(self, request: web.Request, status: int, title: str, message: str, *,
                headers: Mapping[str, str] | None = None) -> web.Response:
        """The page saying why something was refused or could not be done."""
        response = self.page(request, "problem.html", status=status, title=title,
                             message=message)
        response.headers.update(headers or {})
        return response


def environment() -> jinja2.Environment:
    """Made at the first page shown: a proxy whose inspector nobody opens never imports
    Jinja2 (it starts faster)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("sidecar.http.ui", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, finalize=_printable)
    env.filters["urlpart"] = urlpart
    env.filters["ms"] = lambda value: "—" if value is None else f"{float(value):,.1f} ms"
    env.filters["ago"] = ago
    return env


def notice(query: Mapping[str, str]) -> str | None:
    """The announcement a redirect asked for (``?notice=…``), or None. Only fixed texts; the
    one number in them is shown only when it is a plain short number."""
    text = NOTICES.get(query.get("notice", ""))
    if text is None:
        return None
    count = query.get("count", "")
    # isdigit() alone accepts '²' and other digits int() refuses.
    plain = count.isascii() and count.isdigit() and len(count) <= _COUNT_DIGITS
    return text.format(count=int(count) if plain else "?")


def printable(text: str) -> str:
    """``text`` as valid UTF-8: bytes that were not UTF-8 (header values keep them as lone
    surrogates, ``surrogateescape``) shown as ``\\xNN``, any other lone surrogate (a JSON
    body's ``"\\ud800"``) as ``\\uNNNN``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_char(c) for c in text)
    return text


def _char(c: str) -> str:
    point = ord(c)
    if 0xDC80 <= point <= 0xDCFF:
        return f"\\x{point - 0xDC00:02x}"
    if 0xD800 <= point <= 0xDFFF:
        return f"\\u{point:04x}"
    return c


def _printable(value: Any) -> Any:
    return printable(value) if isinstance(value, str) else value


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = float(seconds)
    sign = "in " if seconds < 0 else ""
    left = abs(seconds)
    text = (f"{left:.0f} s" if left < 120 else f"{left / 60:.0f} min" if left < 7200
            else f"{left / 3600:.1f} h")
    return f"{sign}{text}" if sign else f"{text} ago"
