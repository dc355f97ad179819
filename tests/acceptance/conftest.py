"""Deployments for the acceptance layer: the proxy as real subprocesses on a real store.

``sqlite``: one process on an SQLite file. ``postgres``: two processes sharing one freshly
created and migrated PostgreSQL database (migrated by the CLI, as an operator would).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import pytest

from tests.pgserver import ThrowawayCluster
from tests.support import REPO, ProxyProcess, Rows, StubApp, base_config, write_config


@dataclass
class Deployment:
    kind: str
    store_url: str
    stub: StubApp
    tmp: Path
    config: dict[str, Any]
    procs: list[ProxyProcess] = field(default_factory=list)
    client: aiohttp.ClientSession | None = None

    @property
    def rows(self) -> Rows:
        return Rows(self.store_url)

    def url(self, i: int, path: str) -> str:
        return self.procs[i % len(self.procs)].url + path

    async def start(self, count: int | None = None) -> None:
        count = count or (2 if self.kind == "postgres" else 1)
        path = write_config(self.tmp, self.config)
        started = await asyncio.gather(*(ProxyProcess(path).start() for _ in range(count)))
        self.procs = list(started)

    async def stop(self) -> None:
        for proc in self.procs:
            await proc.terminate()
        self.procs = []


async def create_database(admin_dsn: str) -> str:
    """A fresh database on the test server; returns its DSN."""
    name = f"sidecar_acc_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    parts = urlsplit(admin_dsn)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def drop_database(admin_dsn: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``python -m sidecar ARGS``: its exit code, stdout and stderr (``env``: its whole
    environment, instead of ours)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar", *args, cwd=str(REPO),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(params=["sqlite", "postgres"])
async def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Deployment]:
    """The behaviour suite runs on both: SQLite with one process, PostgreSQL with two."""
    admin_dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None
    async with deploy(request.param, tmp_path, admin_dsn) as dep:
        yield dep


@pytest.fixture
async def pg_deployment(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    async with deploy("postgres", tmp_path, pg_dsn) as dep:
        yield dep


@contextlib.asynccontextmanager
async def deploy(kind: str, tmp_path: Path, admin_dsn: str | None) -> AsyncIterator[Deployment]:
    stub = await StubApp().start()
    if admin_dsn is None:
        store_url = f"sqlite:///{tmp_path / 'events.db'}"
    else:
        store_url = await create_database(admin_dsn)
    dep = Deployment(kind, store_url, stub, tmp_path, base_config(stub.url, store_url))
    if admin_dsn is not None:
        code, _, err = await run_cli("migrate", "--config",
                                       str(write_config(tmp_path, dep.config)))
        assert code == 0, err
    try:
        async with aiohttp.ClientSession() as client:
            dep.client = client
            yield dep
    finally:
        for proc in dep.procs:
            await proc.kill()
        await stub.stop()
        if admin_dsn is not None:
            await drop_database(admin_dsn, store_url)


@pytest.fixture
async def own_cluster(tmp_path: Path) -> AsyncIterator[ThrowawayCluster]:
    """A throwaway PostgreSQL cluster of the test's own, for a test that stops or kills it."""
    cluster = ThrowawayCluster(tmp_path / "pg")
    await asyncio.to_thread(cluster.start)
    try:
        yield cluster
    finally:
        await asyncio.to_thread(cluster.cleanup)
