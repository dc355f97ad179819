"""Crash loop: two proxies share PostgreSQL while one of them is SIGKILLed every few seconds,
and a simulated provider delivers a steady stream of events, redelivering anything not
answered 2xx. Checks the invariants the product promises:

- every event is eventually answered 2xx;
- no 2xx for an event the app never received;
- the app receives an event more than once only as a retry of an attempt whose outcome was
  unknown, each extra copy marked with a higher attempt number (attempt 1 at most once).

    .venv/bin/python -m bench.crashloop [--seconds 30] [--rate 20] [--kill-every 2]

Bounded: it stops sending after --seconds and gives up redelivering 30 s later. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from bench.common import signer, with_pg_database
from tests.support import ProxyProcess, Seen, StubApp


def config(stub_url: str, store_url: str) -> dict[str, object]:
    return {
        "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0",
        "upstream": {"url": stub_url, "timeout": "1s"},
        "store": {"url": store_url, "pool_max_size": 5},
        "log": {"level": "info", "format": "json"},
        "providers": {"stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                                 "secrets": ["whsec_bench_0123456789abcdef"], "lease": "2s",
                                 "inflight_wait": "300ms"}},
    }


async def run(store_url: str, seconds: float, rate: float, kill_every: float) -> int:
    stub = await StubApp().start()

    async def some_work(_: Seen) -> web.StreamResponse:
        await asyncio.sleep(random.uniform(0, 0.05))
        return web.json_response({"ok": True})

    stub.behaviour = some_work
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config(stub.url, store_url)))
        migrate = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sidecar", "migrate", "--config", str(path),
            stdout=asyncio.subprocess.DEVNULL)
        assert await migrate.wait() == 0
        procs = [await ProxyProcess(path).start(), await ProxyProcess(path).start()]
        headers = signer(config("http://x", store_url))
        answered: dict[str, int] = {}
        deliveries = Counter[str]()
        kills = 0
        stop_sending = time.monotonic() + seconds
        give_up = stop_sending + 30

        async def provider(client: aiohttp.ClientSession, event_id: str) -> None:
            body = json.dumps({"id": event_id, "type": "crashloop"}).encode()
            while time.monotonic() < give_up:
                proc = random.choice(procs)
                deliveries[event_id] += 1
                try:
                    async with client.post(proc.url + "/webhooks/stripe", data=body,
                                           headers=headers(body)) as resp:
                        await resp.read()
                        if 200 <= resp.status < 300:
                            answered[event_id] = resp.status
                            return
                except aiohttp.ClientError:
                    pass  # the proxy died under us: like a provider, retry later
                await asyncio.sleep(0.2)

        async def killer() -> None:
            nonlocal kills
            while time.monotonic() < stop_sending:
                await asyncio.sleep(kill_every)
                index = random.randrange(len(procs))
                await procs[index].kill()
                kills += 1
                procs[index] = await ProxyProcess(path).start()

        async with aiohttp.ClientSession() as client:
            killing = asyncio.create_task(killer())
            senders = []
            count = 0
            while time.monotonic() < stop_sending:
                senders.append(asyncio.create_task(provider(client, f"evt_{count}")))
                count += 1
                await asyncio.sleep(1 / rate)
            await killing
            await asyncio.gather(*senders)
        for proc in procs:
            await proc.terminate()
    await stub.stop()

    received = Counter(s.event_id for s in stub.seen)
    first_attempts = Counter(s.event_id for s in stub.seen if s.attempt == 1)
    unanswered = [e for e in (f"evt_{i}" for i in range(count)) if e not in answered]
    phantom = [e for e in answered if received[e] == 0]
    double_first = [e for e, n in first_attempts.items() if n > 1]
    extra = sum(n - 1 for n in received.values() if n > 1)
    print(f"{count} events over {seconds:g}s, {kills} proxies SIGKILLed, "
          f"{sum(deliveries.values())} deliveries (with redeliveries)")
    print(f"app received {sum(received.values())} requests: {extra} extra copies "
          f"({extra / count:.2%} of events), every one a retry with attempt > 1")
    print(f"unanswered: {len(unanswered)}; 2xx without the app: {len(phantom)}; "
          f"attempt 1 twice: {len(double_first)}")
    ok = not unanswered and not phantom and not double_first
    print("invariants hold" if ok else "INVARIANT VIOLATED")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=20, help="new events per second")
    parser.add_argument("--kill-every", type=float, default=2)
    args = parser.parse_args()
    code = asyncio.run(with_pg_database(
        lambda dsn: run(dsn, args.seconds, args.rate, args.kill_every)))
    raise SystemExit(code)


if __name__ == "__main__":
    main()
