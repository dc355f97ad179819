"""No spelling of a header the proxy sets reaches the app. A CGI or WSGI server (here the stdlib's
wsgiref, as gunicorn, uWSGI and PHP-FPM do) gives ``Idempotency-Key`` and ``Idempotency_Key`` one
variable, ``HTTP_IDEMPOTENCY_KEY``, and joins their values; so a sender holding one verified
delivery could otherwise make the app read ``Idempotency-Key: stripe:evt_forged,stripe:evt_1``.

The proxy runs as a real subprocess on SQLite; the app is a real WSGI app on loopback that reads
the headers from ``environ``, as every such app does. Deliveries are signed by the stripe SDK."""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from standardwebhooks import Webhook

from tests.acceptance.conftest import Deployment, deploy
from tests.support import post, stripe_event, stripe_headers

STRIPE = "/webhooks/stripe"

# What a sender holding a verified delivery adds: the proxy's headers, in the spellings a
# CGI/WSGI server reads as the proxy's own.
FORGED = {
    "Idempotency_Key": "stripe:evt_forged",
    "X_Webhook_Sidecar_Attempt": "1",
    "X-Webhook_Sidecar-Event-Id": "evt_forged",
    "x_webhook_sidecar_provider": "github",
    "X_Webhook_Sidecar_Batch_Size": "9",
    "X_Forwarded_For": "6.6.6.6",
    "X_Forwarded_Proto": "gopher",
    "X_Real_IP": "6.6.6.7",
}
# The same for the forward-authentication headers.
FORGED_SIGNATURE = {
    "Webhook_Id": "stripe:evt_forged",
    "webhook_timestamp": "1",
    "WEBHOOK_SIGNATURE": "v1,Zm9yZ2Vk",
}


@dataclass(frozen=True)
class Request:
    environ: dict[str, str]  # the HTTP_* variables: the headers as a WSGI app reads them
    body: bytes

    def ours(self) -> dict[str, str]:
        """The variables of the headers the proxy sets."""
        prefixes = ("HTTP_X_WEBHOOK_SIDECAR_", "HTTP_IDEMPOTENCY_KEY", "HTTP_X_FORWARDED_",
                    "HTTP_FORWARDED", "HTTP_X_REAL_IP", "HTTP_WEBHOOK_")
        return {k: v for k, v in self.environ.items() if k.startswith(prefixes)}


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class WsgiApp:
    """The app: a wsgiref server in a thread on loopback. Records each request and answers the
    given ``statuses`` in turn, then 200."""

    def __init__(self, statuses: Iterable[int] = ()) -> None:
        self.requests: list[Request] = []
        self._statuses = list(statuses)
        self._arrived = threading.Condition()
        self._server: WSGIServer = make_server("127.0.0.1", 0, self._app,
                                               handler_class=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def _app(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        status = self._statuses.pop(0) if self._statuses else 200
        with self._arrived:
            self.requests.append(Request(
                {k: v for k, v in environ.items() if k.startswith("HTTP_")}, body))
            self._arrived.notify_all()
        start_response(f"{status} {HTTPStatus(status).phrase}",
                       [("Content-Type", "application/json")])
        return [b"{}"]

    async def until(self, count: int, timeout: float = 10.0) -> None:
        """Until ``count`` requests have arrived; fails past ``timeout``."""
        def wait() -> bool:
            with self._arrived:
                return self._arrived.wait_for(lambda: len(self.requests) >= count, timeout)
        assert await asyncio.to_thread(wait), f"{len(self.requests)} requests, not {count}"

    def __enter__(self) -> WsgiApp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def wsgi_app(request: pytest.FixtureRequest) -> Iterator[WsgiApp]:
    statuses: tuple[int, ...] = getattr(request, "param", ())
    with WsgiApp(statuses) as app:
        yield app


async def _deliver(dep: Deployment, event_id: str, extra: dict[str, str]) -> int:
    assert dep.client is not None
    body = stripe_event(event_id)
    status, _, _ = await post(dep.client, dep.url(0, STRIPE), body,
                              {**stripe_headers(body), "Host": "hooks.example.com", **extra})
    return status


@pytest.mark.parametrize("wsgi_app", [(500,)], indirect=True)
async def test_a_replayed_delivery_cannot_add_to_the_proxys_headers(
        wsgi_app: WsgiApp, tmp_path: Path) -> None:
    """The issue's case: the first attempt fails, and a replay of the captured delivery carrying
    the proxy's headers in other spellings wins the take-over. The app must read attempt 2 and
    the event's own key, exactly as if the replay had carried nothing extra."""
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["upstream"]["url"] = wsgi_app.url
        await dep.start(1)
        assert await _deliver(dep, "evt_hdr_1", {}) == 500
        assert await _deliver(dep, "evt_hdr_1", FORGED) == 200
    first, second = wsgi_app.requests
    expected = {
        "HTTP_IDEMPOTENCY_KEY": "stripe:evt_hdr_1",
        "HTTP_X_WEBHOOK_SIDECAR_EVENT_ID": "evt_hdr_1",
        "HTTP_X_WEBHOOK_SIDECAR_PROVIDER": "stripe",
        "HTTP_X_WEBHOOK_SIDECAR_ATTEMPT": "1",
        "HTTP_X_FORWARDED_FOR": "127.0.0.1",
        "HTTP_X_FORWARDED_PROTO": "http",
        "HTTP_X_FORWARDED_HOST": "hooks.example.com",
    }
    assert first.ours() == expected
    assert second.ours() == {**expected, "HTTP_X_WEBHOOK_SIDECAR_ATTEMPT": "2"}


async def test_with_forward_auth_and_a_trusted_peer_only_the_proxys_values_arrive(
        wsgi_app: WsgiApp, tmp_path: Path) -> None:
    """Forward authentication on, the client's peer trusted: the ``webhook-*`` the app reads are
    the proxy's (and verify), the forwarding headers the trusted peer's plus the proxy's."""
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["upstream"]["url"] = wsgi_app.url
        dep.config["upstream"]["signing_secrets"] = [secret]
        dep.config["trusted_proxies"] = ["127.0.0.1/32"]
        await dep.start(1)
        extra = {**FORGED, **FORGED_SIGNATURE, "X-Forwarded-For": "198.51.100.7",
                 "X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example.com"}
        assert await _deliver(dep, "evt_hdr_2", extra) == 200
    [got] = wsgi_app.requests
    ours = got.ours()
    signature = {k: ours.pop(k) for k in ("HTTP_WEBHOOK_ID", "HTTP_WEBHOOK_TIMESTAMP",
                                          "HTTP_WEBHOOK_SIGNATURE")}
    assert signature["HTTP_WEBHOOK_ID"] == "stripe:evt_hdr_2"
    Webhook(secret).verify(got.body, {k[len("HTTP_"):].lower().replace("_", "-"): v
                                      for k, v in signature.items()})
    assert ours == {
        "HTTP_IDEMPOTENCY_KEY": "stripe:evt_hdr_2",
        "HTTP_X_WEBHOOK_SIDECAR_EVENT_ID": "evt_hdr_2",
        "HTTP_X_WEBHOOK_SIDECAR_PROVIDER": "stripe",
        "HTTP_X_WEBHOOK_SIDECAR_ATTEMPT": "1",
        "HTTP_X_FORWARDED_FOR": "198.51.100.7, 127.0.0.1",
        "HTTP_X_FORWARDED_PROTO": "https",
        "HTTP_X_FORWARDED_HOST": "api.example.com",
    }


async def test_a_queued_delivery_is_forwarded_from_its_stored_request_without_them(
        wsgi_app: WsgiApp, tmp_path: Path) -> None:
    """Queue mode stores the request and a worker forwards it later: the stored headers go
    through the same rule."""
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["upstream"]["url"] = wsgi_app.url
        dep.config["providers"]["stripe"].update(
            {"mode": "queue", "queue": {"poll_interval": "100ms"}})
        await dep.start(1)
        assert await _deliver(dep, "evt_hdr_3", FORGED) == 200
        await wsgi_app.until(1)
    [got] = wsgi_app.requests
    assert got.ours() == {
        "HTTP_IDEMPOTENCY_KEY": "stripe:evt_hdr_3",
        "HTTP_X_WEBHOOK_SIDECAR_EVENT_ID": "evt_hdr_3",
        "HTTP_X_WEBHOOK_SIDECAR_PROVIDER": "stripe",
        "HTTP_X_WEBHOOK_SIDECAR_ATTEMPT": "1",
        "HTTP_X_FORWARDED_FOR": "127.0.0.1",
        "HTTP_X_FORWARDED_PROTO": "http",
        "HTTP_X_FORWARDED_HOST": "hooks.example.com",
    }
