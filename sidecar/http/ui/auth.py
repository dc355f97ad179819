"""The inspector's access rule, sessions and CSRF tokens.

The rule is the admin API's (``sidecar.http.access``): with ``admin_token`` configured, the
token; without one, a loopback peer only. A browser presents the token once, on the login form;
the cookie it gets back holds a value DERIVED from the token (an expiry and an HMAC keyed by
the token), never the token itself, so that a leaked cookie neither reveals the token nor
outlives its expiry, and rotating the token ends every session.

Nothing here is kept per process: with ``workers: N`` the admin listener is served by the first
worker, which the supervisor may replace; a session and its CSRF tokens stay valid across that
because both are computed from the token. Without a token the CSRF key is random per process: a
form rendered by a replaced worker is refused with "reload the page", never accepted.

Every state-changing request is a POST carrying a CSRF token: an HMAC of the session value (or
``loopback``) and the form's action path (in one spelling: ``paths.form_action``), compared in
constant time. A cross-site page can make the browser POST (cookie attached, or from loopback
with none needed) but cannot read a page to learn the token; and such a POST is refused before
that (``access.browser_refusal``).

Sessions are stateless: a copied cookie is good until its expiry, anywhere; only rotating the
token ends sessions, all of them. Cookies ignore ports: another service on the same host name
reads this one's cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from sidecar.core.forwarded import Network
from sidecar.http.access import (
    LOOPBACK,
    TokenForm,
    came_over_https,
    fingerprint,
    from_loopback,
    presents,
    same,
)

COOKIE = "sidecar_inspector"
SESSION_SECONDS = 12 * 3600  # a working day; then the token is asked for again
# A session's expiry is Unix seconds: 10 digits until 2286. Longer is not ours (and int() of a
# few thousand digits raises).
_EXPIRY_DIGITS = 12
CSRF_FIELD = "csrf"


@dataclass(frozen=True, slots=True)
class Operator:
    """Who a request is from, as far as the inspector knows: the session value its CSRF tokens
    are bound to, and what log lines name it by (the token's fingerprint, and the peer)."""

    session: str
    fingerprint: str
    peer: str | None


# Set on a request once it is let in (``middleware.admission``): pages and actions read it.
OPERATOR = web.RequestKey("operator", Operator)


class Authenticator:
    """Decides who is let in, issues sessions and CSRF tokens, and checks them."""

    def __init__(self, token: str | None, *, trusted: Sequence[Network] = (),
                 clock: Callable[[], float] = time.time) -> None:
        self._token = token
        self._trusted = tuple(trusted)  # trusted_proxies: never loopback, may say "https"
        self._clock = clock
        # Keyed by the token (stable across processes) or, without one, a per-process secret.
        self._key = (hmac.new(token.encode(), b"webhook-sidecar inspector", hashlib.sha256)
                     .digest() if token is not None else secrets.token_bytes(32))
        self.fingerprint = fingerprint(token)

    @property
    def needs_login(self) -> bool:
        return self._token is not None

    def operator(self, request: web.Request) -> Operator | None:
        """The operator this request is from, or None when it may not be served: no token
        configured and a request not from this host itself (``access.from_loopback``: a proxy
        in front is not), or a token configured and neither a live session
        cookie nor ``Authorization: Bearer <token>`` (for scripts and curl)."""
        peer = request.remote
        if self._token is None:
            local = from_loopback(request, self._trusted)
            return Operator(LOOPBACK, self.fingerprint, peer) if local else None
        cookie = request.cookies.get(COOKIE)
        if cookie is not None and self.session_valid(cookie):
            return Operator(cookie, self.fingerprint, peer)
        if presents(request.headers.get("Authorization", ""), self._token) is TokenForm.BEARER:
            return Operator("bearer", self.fingerprint, peer)
        return None

    def token_matches(self, given: str) -> bool:
        return self._token is not None and same(given, self._token)

    def new_session(self) -> str:
        """A cookie value: ``<expiry>.<HMAC(expiry)>``, valid for ``SESSION_SECONDS``."""
        expires = int(self._clock()) + SESSION_SECONDS
        return f"{expires}.{self._mac('session', str(expires))}"

    def session_valid(self, value: str) -> bool:
        """Whether a cookie value is a live session of this token. Any other value (malformed,
        forged, expired) is False, never an error: the browser is then logged out."""
        expires, _, mac = value.partition(".")
        if not (expires.isascii() and expires.isdigit() and len(expires) <= _EXPIRY_DIGITS):
            return False  # isdigit() alone accepts '²', which int() refuses
        if int(expires) <= self._clock() or not mac.isascii():
            return False
        return hmac.compare_digest(mac.encode(), self._mac("session", expires).encode())

    def csrf(self, operator: Operator, action: str) -> str:
        """The token a form posting to ``action`` (its path) carries."""
        return self._mac("csrf", operator.session, action)

    def csrf_valid(self, operator: Operator, action: str, given: str | None) -> bool:
        return given is not None and given.isascii() and hmac.compare_digest(
            given.encode(), self.csrf(operator, action).encode())

    def set_session(self, response: web.StreamResponse, request: web.Request) -> None:
        """A new session cookie: HttpOnly (no script reads it), SameSite=Strict (no other
        site's page sends it), for the inspector's paths only, and Secure when the browser came
        over https (``access.came_over_https``: a TLS-terminating ingress in
        ``trusted_proxies`` says so)."""
        response.set_cookie(COOKIE, self.new_session(), max_age=SESSION_SECONDS, path="/ui/",
                            httponly=True, samesite="Strict",
                            secure=came_over_https(request, self._trusted))

    def _mac(self, *parts: str) -> str:
        message = "\x00".join(parts).encode("utf-8", "surrogateescape")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()


def end_session(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/ui/")
