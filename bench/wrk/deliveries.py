"""Deliveries: GitHub push-like bodies, unique per delivery id, signed as GitHub does; written
to the file bench/wrk/deliveries.lua reads, or sent once each to prime a phase."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import aiohttp

from bench.wrk.procs import BenchError

SECRET = "bench-wrk-github-secret"
PATH = "/webhooks/github"
EVENT = "push"

BODY_PREFIX = json.dumps({
    "ref": "refs/heads/main", "before": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
    "repository": {"id": 186853002, "node_id": "MDEwOlJlcG9zaXRvcnkxODY4NTMwMDI=",
                   "name": "Hello-World", "full_name": "Codertocat/Hello-World",
                   "private": False, "html_url": "https://github.com/Codertocat/Hello-World",
                   "default_branch": "main"},
    "pusher": {"name": "Codertocat", "email": "21031067+Codertocat@users.noreply.github.com"},
    "sender": {"login": "Codertocat", "id": 21031067, "type": "User",
               "avatar_url": "https://avatars1.githubusercontent.com/u/21031067?v=4"},
    "created": False, "deleted": False, "forced": False, "compare":
        "https://github.com/Codertocat/Hello-World/compare/6113728f27ae...000000000000",
    "commits": [{"message": "Update README.md", "timestamp": "2019-05-15T15:20:41Z",
                 "author": {"name": "Codertocat", "username": "Codertocat"},
                 "added": [], "removed": [], "modified": ["README.md"]}],
}, separators=(",", ":"))[:-1] + ',"head_commit":{"id":"'
BODY_SUFFIX = '","message":"Update README.md","distinct":true}}'


def body_of(delivery_id: str) -> bytes:
    return (BODY_PREFIX + delivery_id + BODY_SUFFIX).encode()


def signature_of(body: bytes) -> str:
    return hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


def new_ids(count: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(count)]


def write_deliveries(path: Path, ids: Iterable[str]) -> Path:
    with open(path, "w") as out:
        out.write(f"{PATH}\n{EVENT}\n{BODY_PREFIX}\n{BODY_SUFFIX}\n")
        for delivery_id in ids:
            out.write(f"{delivery_id} {signature_of(body_of(delivery_id))}\n")
    return path


def headers_of(delivery_id: str, body: bytes) -> dict[str, str]:
    return {"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/bench",
            "X-GitHub-Event": EVENT, "X-GitHub-Delivery": delivery_id,
            "X-Hub-Signature-256": "sha256=" + signature_of(body)}


async def prime(url: str, ids: Sequence[str], concurrency: int = 32) -> None:
    """Deliver each id once, 2xx expected (the first delivery, which the duplicates repeat)."""
    queue = list(ids)
    failures: list[str] = []

    async def worker(client: aiohttp.ClientSession) -> None:
        while queue:
            delivery_id = queue.pop()
            body = body_of(delivery_id)
            async with client.post(url + PATH, data=body,
                                   headers=headers_of(delivery_id, body)) as resp:
                await resp.read()
                if resp.status // 100 != 2:
                    failures.append(f"{delivery_id}: {resp.status}")

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=concurrency)) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    if failures:
        raise BenchError(f"priming {len(failures)} deliveries failed: {failures[:3]}")

