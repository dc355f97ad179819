"""Test helpers shared by the integration and acceptance layers: a recording stub app, the proxy
as a real subprocess, and signed Stripe deliveries made by the ``stripe`` SDK."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import socket
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import aiohttp
import asyncpg
import stripe
import yaml
from aiohttp import web

REPO = Path(__file__).resolve().parent.parent
STRIPE_SECRET = "whsec_test_acceptance_secret_0123456789"
GITHUB_SECRET = "It's a Secret to Everybody"  # GitHub's documented example


@dataclass
class Seen:
    """One request that reached the stub app, and what (and when) the app answered."""

    event_id: str
    attempt: int
    idempotency_key: str
    body: bytes
    headers: dict[str, str]
    at: float = 0.0  # time.monotonic() when its headers were in (before the body was read)
    status: int | None = None  # None: not answered (yet)
    answered: float | None = None  # time.monotonic() when the app answered


Behaviour = Callable[[Seen], Awaitable[web.StreamResponse]]


async def answer_200(seen: Seen) -> web.StreamResponse:
    return web.json_response({"ok": True, "event": seen.event_id, "attempt": seen.attempt})


async def serve_on_loopback(app: web.Application, **runner: Any) -> tuple[web.AppRunner, int]:
    """``app`` served on 127.0.0.1 at a free port: its runner (``cleanup()`` stops it) and the
    port. ``runner``: ``web.AppRunner``'s options."""
    started = web.AppRunner(app, access_log=None, **runner)
    await started.setup()
    await web.TCPSite(started, "127.0.0.1", 0).start()
    return started, started.addresses[0][1]


class StubApp:
    """The app behind the proxy, on loopback. Records every request it receives; its answer is
    decided by ``behaviour`` (replaceable mid-test). ``hold`` blocks answers until released, so a
    test can keep an attempt in flight without sleeping.

    ``listen_later``: the port is bound at once (``url`` is known before the proxy's config is
    written) but listens only from :meth:`start`; until then a connection is refused, as to an
    app that is down."""

    def __init__(self, *, listen_later: bool = False) -> None:
        self.seen: list[Seen] = []
        self.behaviour: Behaviour = answer_200
        self.hold = asyncio.Event()
        self.hold.set()
        self.arrived = asyncio.Condition()  # notified when a request arrives and when answered
        self._runner: web.AppRunner | None = None
        self._sock: socket.socket | None = None
        self.port = 0
        if listen_later:
            self._sock = socket.socket()
            self._sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
            self.port = self._sock.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def count(self, event_id: str | None = None) -> int:
        return sum(1 for s in self.seen if event_id is None or s.event_id == event_id)

    def attempts(self, event_id: str) -> list[int]:
        return [s.attempt for s in self.seen if s.event_id == event_id]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0,
                       what: str = "the condition") -> None:
        try:
            async with self.arrived:
                await asyncio.wait_for(self.arrived.wait_for(predicate), timeout)
        except TimeoutError:
            raise AssertionError(f"within {timeout:g} s: {what}; the app had "
                                 f"{len(self.seen)} requests") from None

    async def _notify(self) -> None:
        async with self.arrived:
            self.arrived.notify_all()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        at = time.monotonic()
        seen = Seen(
            event_id=request.headers.get("X-Webhook-Sidecar-Event-Id", ""),
            attempt=int(request.headers.get("X-Webhook-Sidecar-Attempt", "0")),
            idempotency_key=request.headers.get("Idempotency-Key", ""),
            body=await request.read(),
            headers=dict(request.headers),
            at=at,
        )
        self.seen.append(seen)
        await self._notify()
        await self.hold.wait()
        response = await self.behaviour(seen)
        seen.status, seen.answered = response.status, time.monotonic()
        await self._notify()
        return response

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        if self._sock is not None:
            await web.SockSite(self._runner, self._sock).start()
        else:
            await web.TCPSite(self._runner, "127.0.0.1", 0).start()
            self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        self.hold.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._sock is not None:
            self._sock.close()


def stripe_event(event_id: str, **extra: Any) -> bytes:
    return json.dumps({"id": event_id, "object": "event", "type": "invoice.paid",
                       **extra}).encode()


def stripe_headers(body: bytes, secret: str = STRIPE_SECRET,
                   timestamp: int | None = None) -> dict[str, str]:
    """Signed by the stripe SDK itself (an independent oracle for our verifier)."""
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=timestamp or int(time.time()))
    return {"Stripe-Signature": header, "Content-Type": "application/json"}


def base_config(upstream_url: str, store_url: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "admin_listen": "127.0.0.1:0",
        "upstream": {"url": upstream_url, "timeout": "2s", "connect_timeout": "1s"},
        "store": {"url": store_url, "acquire_timeout": "1s", "statement_timeout": "2s"},
        "shutdown_timeout": "10s",
        "log": {"level": "info", "format": "json"},
        "providers": {
            "stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                       "secrets": [STRIPE_SECRET], "lease": "4s", "inflight_wait": "1s"},
            "github": {"path": "/webhooks/github", "preset": "github",
                       "secrets": [GITHUB_SECRET], "lease": "4s",
                       "inflight_wait": "1s"},
            "slack": {"path": "/webhooks/slack", "preset": "slack",
                      "secrets": ["8f742231b10e8888abcd99yyyzzz85a5"], "lease": "4s",
                      "inflight_wait": "1s"},
        },
    }
    for key, value in overrides.items():
        config[key] = value
    return config


# Proxy processes started and not yet seen to exit: tests/conftest.py kills any a test left
# running, before its event loop closes (uvloop's close waits for its child processes).
STARTED: set[asyncio.subprocess.Process] = set()


@dataclass
class ProxyProcess:
    """``python -m sidecar run`` as a real subprocess, logging JSON lines to stderr.
    ``env``: variables added to its environment; ``open_files``: its open-file limit (soft and
    hard, as ``ulimit -n`` sets it), inherited by any worker process it starts; ``argv0``: the
    path the interpreter is started under (its ``sys.executable``, which a supervisor starts
    its workers with), instead of this interpreter's own."""

    config_path: Path
    env: dict[str, str] = field(default_factory=dict)
    open_files: int | None = None
    argv0: str | None = None
    proc: asyncio.subprocess.Process | None = None
    listen: str = ""
    admin: str = ""
    logs: list[dict[str, Any]] = field(default_factory=list)
    raw_logs: list[str] = field(default_factory=list)
    _reader: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.listen}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.admin}"

    async def start(self, timeout: float = 20.0, until: str = "listening") -> ProxyProcess:
        """Started, once it logs ``until`` (by default ``listening``, whose addresses become
        ``url`` and ``admin_url``)."""
        command = [self.argv0 or sys.executable, "-m", "sidecar", "run", "--config",
                   str(self.config_path)]
        if self.argv0 is not None:
            # This interpreter, execed under the name argv0 (its sys.executable then). Not
            # create_subprocess_exec's `executable`: uvloop runs that under its own name.
            trampoline = "import os, sys; os.execv(sys.argv[1], sys.argv[2:])"
            command = [sys.executable, "-c", trampoline, sys.executable, *command]
        if self.open_files is not None:  # the shell execs the proxy: same pid, lower limit
            command = ["sh", "-c", f'ulimit -n {self.open_files} && exec "$@"', "sh", *command]
        self.proc = await asyncio.create_subprocess_exec(
            # stdout: nothing reads it, and an unread pipe's transport outlives the process
            # (a ResourceWarning whenever the garbage collector gets to it).
            *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            cwd=str(REPO), env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        STARTED.add(self.proc)
        listening: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read(listening, until))
        try:
            await asyncio.wait_for(asyncio.shield(listening), timeout)
        except (TimeoutError, RuntimeError):
            await self.kill()
            raise RuntimeError("proxy did not start:\n" + "\n".join(self.raw_logs)) from None
        return self

    async def _read(self, listening: asyncio.Future[None], until: str) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.raw_logs.append(line)
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                self.logs.append(entry)
                if entry.get("event") == "listening" and not self.listen:
                    self.listen, self.admin = entry["listen"], entry["admin_listen"]
                if entry.get("event") == until and not listening.done():
                    listening.set_result(None)
        if not listening.done():
            listening.set_exception(RuntimeError("exited"))

    async def wait_for_log(self, event: str, timeout: float = 10.0) -> dict[str, Any]:
        async def find() -> dict[str, Any]:
            while True:
                for entry in self.logs:
                    if entry.get("event") == event:
                        return entry
                await asyncio.sleep(0.01)  # polling our own log buffer, bounded below
        return await asyncio.wait_for(find(), timeout)

    async def kill(self) -> None:
        """SIGKILL: no cleanup, no result write — a crash."""
        if self.proc is not None:
            self.signal(signal.SIGKILL)
        await self.wait()

    async def terminate(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        self.signal(signal.SIGTERM)
        return await self.wait(timeout)

    def signal(self, signum: int) -> None:
        """Send ``signum`` unless the process is known to be gone. Not ``Process.send_signal``:
        on Python 3.11 it polls first, and a poll that reaps an exited process leaves asyncio's
        child watcher without its status (it then reports exit status 255)."""
        assert self.proc is not None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signum)

    async def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        STARTED.discard(self.proc)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, timeout)
        return code


async def until(condition: Callable[[], bool], timeout: float) -> None:
    """Until ``condition`` (on a process's log lines read so far, or on /proc) holds; fails
    past ``timeout``."""
    async def poll() -> None:
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)  # polling, bounded by wait_for

    await asyncio.wait_for(poll(), timeout)


def write_config(tmp: Path, config: dict[str, Any], name: str = "config.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(config))
    return path


class Rows:
    """Reads event rows with plain SQL, independently of the store adapters."""

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url

    async def all(self) -> list[dict[str, Any]]:
        query = ("SELECT provider, event_id, state, attempt, response_status FROM webhook_event "
                 "ORDER BY provider, event_id")
        if self.store_url.startswith("sqlite:"):
            with contextlib.closing(sqlite3.connect(self.store_url[len("sqlite:///"):])) as db:
                db.row_factory = sqlite3.Row
                return [dict(r) for r in db.execute(query)]
        conn = await asyncpg.connect(self.store_url)
        try:
            return [dict(r) for r in await conn.fetch(query)]
        finally:
            await conn.close()

    async def one(self, provider: str, event_id: str) -> dict[str, Any] | None:
        rows = [r for r in await self.all()
                if r["provider"] == provider and r["event_id"] == event_id]
        return rows[0] if rows else None

    async def lease_expired(self, provider: str, event_id: str) -> bool:
        """Asks the database clock, as the proxy does."""
        if self.store_url.startswith("sqlite:"):
            query = ("SELECT lease_until < (julianday('now') - 2440587.5) * 86400.0 FROM "
                     "webhook_event WHERE provider = ? AND event_id = ?")
            with contextlib.closing(sqlite3.connect(self.store_url[len("sqlite:///"):])) as db:
                return bool(db.execute(query, (provider, event_id)).fetchone()[0])
        conn = await asyncpg.connect(self.store_url)
        try:
            return bool(await conn.fetchval(
                "SELECT lease_until < clock_timestamp() FROM webhook_event "
                "WHERE provider = $1 AND event_id = $2", provider, event_id))
        finally:
            await conn.close()


async def post(client: aiohttp.ClientSession, url: str, body: bytes,
               headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    # Large bodies go as a stream, as aiohttp asks (raw bytes over 1 MiB warn).
    data = io.BytesIO(body) if len(body) > 1024 * 1024 else body
    async with client.post(url, data=data, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


class ClaimFails:
    """A real store whose claims raise ``error`` — every one, or only claim number ``nth`` —
    as if the database went away (a ``StoreError``) or the claim had a bug (anything else).
    Every other verb reaches the real store."""

    def __init__(self, inner: Any, error: BaseException, nth: int | None = None) -> None:
        self.inner = inner
        self.error = error
        self.nth = nth
        self.claims = 0

    async def claim(self, *args: Any) -> Any:
        self.claims += 1
        if self.nth is None or self.claims == self.nth:
            raise self.error
        return await self.inner.claim(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ProxyGroup:
    """What a deployment of queue-mode proxies on one store shares, for a dataclass that holds
    ``store_url``, ``tmp``, ``config``, ``client`` and ``procs``: its rows, its config file,
    starting proxies and sending Stripe deliveries to them in turn."""

    store_url: str
    tmp: Path
    config: dict[str, Any]
    client: aiohttp.ClientSession
    procs: list[ProxyProcess]
    route = "/webhooks/stripe"

    @property
    def rows(self) -> Rows:
        return Rows(self.store_url)

    @property
    def config_path(self) -> str:
        return str(write_config(self.tmp, self.config))

    def url(self, i: int) -> str:
        return self.procs[i % len(self.procs)].url + self.route

    async def start(self, count: int) -> None:
        path = write_config(self.tmp, self.config)
        self.procs += list(await asyncio.gather(*(ProxyProcess(path).start()
                                                  for _ in range(count))))

    async def send(self, i: int, body: bytes) -> tuple[int, dict[str, str], bytes]:
        return await post(self.client, self.url(i), body, stripe_headers(body))
