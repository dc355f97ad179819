"""Test doubles for webhook-sidecar's own tests and for yours: an in-memory store, a scripted
stand-in for the app, and a pipeline wired with them.

    from sidecar.runtime.testing import FakeUpstream, MemoryStore, pipeline_for

    upstream = FakeUpstream()                       # answers 200 {} unless told otherwise
    pipeline = pipeline_for(config, store=MemoryStore(), upstream=upstream)
    answer = await pipeline.deliver(config.providers[0], inbound(body, headers))
    assert answer.status == 200 and len(upstream.requests) == 1

Everything here runs in one event loop with no I/O, so a test of the whole delivery path takes
milliseconds. The in-memory store passes the same contract suite as the real ones, but holds
nothing across processes: it is for tests, never for running the proxy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from multidict import CIMultiDict, CIMultiDictProxy

from sidecar.config.keyring import Keyring
from sidecar.config.model import Config
from sidecar.core.errors import UpstreamError
from sidecar.core.events import Outcome, RecordedResponse
from sidecar.core.known import KnownAnswers
from sidecar.core.ports import Store
from sidecar.delivery import Inbound, Pipeline
from sidecar.obs.metrics import Metrics
from sidecar.runtime.wiring import build_forwarder, build_pipeline
from sidecar.store.memory import MemoryStore

__all__ = ["FakeUpstream", "MemoryStore", "SentRequest", "inbound", "pipeline_for"]

OK = RecordedResponse(200, (("Content-Type", "application/json"),), b"{}")


@dataclass(frozen=True, slots=True)
class SentRequest:
    """One request the proxy sent to the app."""

    method: str
    path: str
    headers: CIMultiDictProxy[str]
    body: bytes


Reply = RecordedResponse | Outcome  # an HTTP answer, or how the attempt failed without one


@dataclass
class FakeUpstream:
    """The app, scripted: ``reply`` decides each answer (default 200 ``{}``); an ``Outcome``
    (``TIMEOUT``, ``CONNECT_ERROR``, ``DISCONNECTED``) makes the request fail as the real
    client would. While ``gate`` is cleared, requests wait at the app (an attempt in flight)."""

    reply: Callable[[SentRequest], Reply] = lambda _: OK
    requests: list[SentRequest] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set by each request

    def __post_init__(self) -> None:
        self.gate.set()

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def send(self, method: str, path_qs: str, headers: list[tuple[str, str]],
                   body: bytes) -> RecordedResponse:
        sent = SentRequest(method, path_qs, CIMultiDictProxy(CIMultiDict(headers)), body)
        self.requests.append(sent)
        self.arrived.set()
        await self.gate.wait()
        reply = self.reply(sent)
        if isinstance(reply, Outcome):
            raise UpstreamError(reply, f"fake upstream: {reply.value}")
        return reply

    def event_ids(self) -> list[str | None]:
        return [r.headers.get("X-Webhook-Sidecar-Event-Id") for r in self.requests]


def inbound(body: bytes, headers: Mapping[str, str] | Iterable[tuple[str, str]], *,
            path: str = "/", method: str = "POST", peer: str | None = None,
            scheme: str = "http") -> Inbound:
    """An inbound request as the HTTP shell would build it (``headers`` may repeat a name when
    given as pairs; ``peer``: the TCP peer's address, unknown by default)."""
    query = path.partition("?")[2]
    return Inbound(method, path, query, CIMultiDictProxy(CIMultiDict(headers)), body, peer,
                   scheme)


def pipeline_for(config: Config, *, store: Store | None = None,
                 upstream: FakeUpstream | Mapping[str, FakeUpstream] | None = None,
                 clock: Callable[[], float] = time.time,
                 metrics: Metrics | None = None,
                 owner: str = "test") -> Pipeline:
    """The delivery pipeline wired as in production (``config.trusted_proxies`` included),
    with test doubles by default (``upstream``: one app, or one per provider key). ``clock``
    is the one clock of the test: signatures, the in-memory store and the memory of known
    answers (``answer_cache``) all read it."""
    metrics = metrics or Metrics()
    store = store or MemoryStore(clock=clock)
    keyring = Keyring(config.providers, config.upstream.signing_secrets)
    forwarder = build_forwarder(store, upstream or FakeUpstream(), metrics, set(), keyring,
                                clock=clock)
    return build_pipeline(config, store, forwarder, keyring, metrics, owner=owner, clock=clock,
                          known=KnownAnswers(config.answer_cache, clock))

