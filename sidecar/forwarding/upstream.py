"""The upstream adapter: forwards one delivery to the app with aiohttp's client and returns its
answer as a plain value, translating client errors into ``UpstreamError``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import aiohttp

from sidecar.config.model import UpstreamConfig
from sidecar.core.errors import UpstreamError
from sidecar.core.events import Outcome, RecordedResponse
from sidecar.core.forwarded import is_forwarding
from sidecar.core.headers import is_plain, set_by_proxy

# RFC 9110 §7.6.1 plus the older RFC 7230 list: never forwarded by a proxy.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
    "upgrade", "proxy-authenticate", "proxy-authorization",
})
# Framing and identity the client sets itself for the new hop.
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length"}
# Not replayed: framing (the body may be truncated and is already decoded), per-hop metadata.
_RESPONSE_DROP = HOP_BY_HOP | {"content-length", "content-encoding", "date", "server",
                               "set-cookie"}


def forwardable_headers(
    headers: Iterable[tuple[str, str]], added: dict[str, str]
) -> list[tuple[str, str]]:
    """Request headers for the upstream hop: hop-by-hop ones and any named in ``Connection``
    removed, then ``added`` (the proxy's own) appended. So that a sender cannot spoof what only
    the proxy says (event id, attempt, key, forward signature), one rule: an incoming header
    whose CGI name (``core.headers.cgi_name``) is a header the proxy sets is dropped — every
    ``X-Webhook-Sidecar-*``, ``Idempotency-Key``, each of ``added``, and a forwarding header
    spelt otherwise than ``core.forwarded`` sets it (``X_Forwarded_For``). A CGI/WSGI app would
    read ``Idempotency_Key`` as ``Idempotency-Key``, its value joined with ours.

    ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` are the proxy's only when
    forward authentication is on (they are then in ``added``); otherwise a Standard Webhooks
    provider's own reach the app as sent, for the app to verify."""
    pairs = list(headers)
    # A sender's Connection header may not strip the forwarding headers the proxy set itself
    # (``core.forwarded`` has already decided which of them the app gets).
    named = {
        token.strip().lower()
        for name, value in pairs if name.lower() == "connection"
        for token in value.split(",") if not is_forwarding(token.strip())
    }
    dropped = _REQUEST_DROP | named
    # ``headers`` hold the forwarding headers core.forwarded chose, plainly spelt; another
    # spelling can only be in a request stored before that rule dropped it.
    kept = [(n, v) for n, v in pairs
            if n.lower() not in dropped and not set_by_proxy(n, added)
            and not (is_forwarding(n) and not is_plain(n))]
    return kept + list(added.items())


def replayable_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((n, v) for n, v in headers if n.lower() not in _RESPONSE_DROP)


class Upstream:
    """One pooled client session to the app. Start it inside the event loop."""

    def __init__(self, config: UpstreamConfig) -> None:
        self._config = config
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self._config.max_connections,
            # Shorter than typical app-server idle timeouts, so a pooled connection is rarely
            # closed by the app just as we reuse it (aiohttp never re-sends a POST).
            keepalive_timeout=self._config.keepalive_timeout,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self._config.timeout,
                                          sock_connect=self._config.connect_timeout),
            auto_decompress=True,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(
        self, method: str, path_qs: str, headers: list[tuple[str, str]], body: bytes
    ) -> RecordedResponse:
        """One HTTP request to the app; its answer, or ``UpstreamError``. Records nothing."""
        if self._session is None:
            raise RuntimeError("Upstream.start() was not awaited")
        url = self._config.url + path_qs
        limit = self._config.max_response_bytes
        try:
            async with self._session.request(
                method, url, data=body, headers=headers, allow_redirects=False,
            ) as resp:
                content = await read_bounded(resp.content, limit)
                return RecordedResponse(
                    status=resp.status, headers=replayable_headers(resp.headers.items()),
                    body=content,
                )
        except aiohttp.ConnectionTimeoutError as exc:
            raise UpstreamError(Outcome.CONNECT_ERROR, "connect timed out") from exc
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamError(Outcome.TIMEOUT, f"no answer within {self._config.timeout:g}s") \
                from exc
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamError(Outcome.CONNECT_ERROR, str(exc.os_error)) from exc
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as exc:
            raise UpstreamError(Outcome.DISCONNECTED, type(exc).__name__) from exc


async def read_bounded(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """Up to ``limit`` bytes of the body; the rest is not read (the connection is then closed)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
