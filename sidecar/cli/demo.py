"""``webhook-sidecar demo``: the proxy in front of a built-in echo app, on a temporary SQLite
store, driven by signed deliveries on loopback. Prints what each delivery got and how many
reached the app; exits non-zero if anything behaved unlike the contract."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web

from sidecar.config.loader import parse_config
from sidecar.config.model import Config
from sidecar.core.signing import Delivery, sign
from sidecar.obs.logs import configure_logging
from sidecar.runtime.serve import start, stop

BURST = 25


class EchoApp:
    """The app behind the proxy: counts what reaches it; fails the first attempt of any event
    whose id starts with ``flaky``."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.attempts: list[tuple[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        event_id = request.headers.get("X-Webhook-Sidecar-Event-Id", "?")
        attempt = request.headers.get("X-Webhook-Sidecar-Attempt", "?")
        self.seen[event_id] += 1
        self.attempts.append((event_id, attempt))
        await asyncio.sleep(0.3)  # a little work, so concurrent duplicates find it in flight
        if event_id.startswith("flaky") and attempt == "1":
            return web.json_response({"error": "database hiccup"}, status=500)
        return web.json_response({"processed": event_id, "attempt": int(attempt)})


async def run_demo(quiet: bool = False) -> int:
    configure_logging("error", "console")
    echo = EchoApp()
    app = web.Application()
    app.router.add_post("/{tail:.*}", echo.handle)
    echo_runner = web.AppRunner(app, access_log=None)
    await echo_runner.setup()
    site = web.TCPSite(echo_runner, "127.0.0.1", 0)
    await site.start()
    echo_port = echo_runner.addresses[0][1]
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    failures: list[str] = []

    def say(line: str) -> None:
        if not quiet:
            print(line)

    with tempfile.TemporaryDirectory(prefix="webhook-sidecar-demo-") as tmp:
        config = _config(Path(tmp) / "demo.db", echo_port, secret)
        running = await start(config)
        url = f"http://{running.listen}/webhooks/demo"
        say(f"proxy on {running.listen} → echo app on 127.0.0.1:{echo_port}; store "
            f"{config.store.sqlite_path} (temporary)\n")
        try:
            async with aiohttp.ClientSession() as client:
                await _scenarios(client, url, config, echo, say, failures)
        finally:
            await stop(running)
            await echo_runner.cleanup()

    total = sum(echo.seen.values())
    print(f"\n{total} request(s) reached the app for {len(echo.seen)} event(s): "
          + ", ".join(f"{e}×{n}" for e, n in echo.seen.items()))
    if failures:
        print("demo FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("demo OK: every event reached the app exactly once per needed attempt")
    return 0


async def _scenarios(client: aiohttp.ClientSession, url: str, config: Config, echo: EchoApp,
                     say: object, failures: list[str]) -> None:
    assert callable(say)
    provider = config.providers[0]

    async def deliver(event_id: str) -> tuple[int, str, str]:
        body = json.dumps({"type": "invoice.paid", "id": event_id}).encode()
        headers = {"webhook-id": event_id, "content-type": "application/json"}
        headers.update(sign(provider.signature, provider.key_bytes[0], Delivery(body, headers),
                            time.time()))
        async with client.post(url, data=body, headers=headers) as resp:
            await resp.read()
            return (resp.status, resp.headers.get("X-Webhook-Sidecar-Replay", "no"),
                    resp.headers.get("X-Webhook-Sidecar-Attempt", "-"))

    def check(ok: bool, what: str) -> None:
        if not ok:
            failures.append(what)

    first = f"evt_{uuid.uuid4().hex[:8]}"
    status, replay, attempt = await deliver(first)
    say(f"1. first delivery of {first}: {status} (attempt {attempt}); app saw it "
        f"{echo.seen[first]}×")
    check(status == 200 and echo.seen[first] == 1, "first delivery not forwarded once")

    burst = f"evt_{uuid.uuid4().hex[:8]}"
    results = await asyncio.gather(*(deliver(burst) for _ in range(BURST)))
    by_status = Counter(s for s, _, _ in results)
    say(f"2. {BURST} concurrent copies of {burst}: statuses {dict(by_status)}; app saw it "
        f"{echo.seen[burst]}×")
    check(echo.seen[burst] == 1, "burst reached the app more than once")
    check(all(s in (200, 409) for s in by_status), "burst got an unexpected status")

    status, replay, attempt = await deliver(first)
    say(f"3. redelivery of {first}: {status}, replayed={replay}; app still saw it "
        f"{echo.seen[first]}×")
    check(status == 200 and replay == "true" and echo.seen[first] == 1, "redelivery reached app")

    flaky = f"flaky_{uuid.uuid4().hex[:8]}"
    status1, _, attempt1 = await deliver(flaky)
    status2, _, attempt2 = await deliver(flaky)
    say(f"4. {flaky}: app failed attempt {attempt1} → provider got {status1}; the provider's "
        f"retry was forwarded as attempt {attempt2} → {status2}")
    check(status1 == 500 and status2 == 200 and attempt2 == "2", "failure/retry misbehaved")


def _config(db: Path, echo_port: int, secret: str) -> Config:
    return parse_config({
        "listen": "127.0.0.1:0",
        "admin_listen": "127.0.0.1:0",
        "upstream": {"url": f"http://127.0.0.1:{echo_port}", "timeout": "5s"},
        "store": {"url": f"sqlite:///{db}"},
        "shutdown_timeout": "5s",
        "providers": {
            "demo": {
                "path": "/webhooks/demo",
                "preset": "standard-webhooks",
                "secrets": [secret],
                "inflight_wait": "2s",
            },
        },
    }, env={})
