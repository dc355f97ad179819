"""The upstream adapter: forwards one delivery to the app with aiohttp's client and returns its
answer as a plain value, translating client errors into ``UpstreamError``. ``Upstreams``: one
client per distinct upstream the providers use, by provider key."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence

import aiohttp

from sidecar.config.model import ProviderConfig, UpstreamConfig
from sidecar.core.body import read_bounded
from sidecar.core.errors import UpstreamError
from sidecar.core.events import Outcome, RecordedResponse
from sidecar.core.hops import replayable_headers


class Upstream:
    """One pooled client session to the app. Start it inside the event loop."""

    def __init__(self, config: UpstreamConfig) -> None:
        self._config = config
        self._url = config.target
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
            # The app's answer is relayed and recorded as it came, Content-Encoding included
            # (``core.hops.replayable_headers``): nothing to decode, no decoder per answer.
            auto_decompress=False,
            # A proxy keeps no cookies: an app's Set-Cookie is not sent back to it.
            cookie_jar=aiohttp.DummyCookieJar(),
            # No trace configs: tracing makes its own spans (``Forwarder``). No skipped auto
            # headers: aiohttp adds Accept, Accept-Encoding and User-Agent only where the
            # provider sent none, and the app has always had them then.
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
        url = self._url + path_qs
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



class Upstreams(Mapping[str, Upstream]):
    """The client to each provider's upstream, by provider key: providers whose upstream blocks
    are equal share one client (one connection pool). Nothing connects before the first
    forward, so an app that starts after the proxy is fine."""

    def __init__(self, providers: Sequence[ProviderConfig]) -> None:
        shared: dict[UpstreamConfig, Upstream] = {}
        self._by_provider = {p.key: shared.setdefault(p.upstream, Upstream(p.upstream))
                             for p in providers}
        self._clients = list(shared.values())

    def __getitem__(self, provider: str) -> Upstream:
        return self._by_provider[provider]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_provider)

    def __len__(self) -> int:
        return len(self._by_provider)

    async def start(self) -> None:
        for client in self._clients:
            await client.start()

    async def close(self) -> None:
        for client in self._clients:
            await client.close()
