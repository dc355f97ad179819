"""Find a MariaDB (or MySQL 8) server for the test suite, or start a throwaway one. Never skip.

Order of preference, as ``tests/pgserver.py`` does for PostgreSQL:

1. ``SIDECAR_TEST_MYSQL_DSN`` (a ``mysql://`` or ``mariadb://`` URL to a user allowed to CREATE
   and DROP DATABASE), e.g. a MySQL 8 server. Set but unreachable: the suite fails.
2. ``mysql://root@127.0.0.1:3306/`` (a development machine's server, no password).
3. A :class:`ThrowawayServer`: ``mariadb-install-db`` into a temp dir, ``mariadbd`` on a free
   loopback port and its own socket, removed at the end of the session.

When none of these works :func:`find_or_start` raises ``MariaDBServerError`` and the fixtures
fail the run. Each test session (each xdist worker) makes its own databases on the server.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncmy

from tests.pgserver import free_port, run_sync

ENV_DSN = "SIDECAR_TEST_MYSQL_DSN"
DEFAULT_DSN = "mysql://root@127.0.0.1:3306/"
START_TIMEOUT = 60.0  # seconds for mariadbd to answer
PROBE_TIMEOUT = 3.0


class MariaDBServerError(RuntimeError):
    """No MariaDB/MySQL server could be found or started."""


def with_database(dsn: str, dbname: str) -> str:
    """``dsn`` pointing at database ``dbname`` instead."""
    return urlunsplit(urlsplit(dsn)._replace(path="/" + dbname))


def _connect_args(dsn: str) -> dict[str, object]:
    parts = urlsplit(dsn)
    return {"host": parts.hostname or "127.0.0.1", "port": parts.port or 3306,
            "user": parts.username or "root", "password": parts.password or "",
            "connect_timeout": PROBE_TIMEOUT, "autocommit": True}


async def admin(dsn: str, *statements: str) -> None:
    """Run ``statements`` as the server's admin user (no database selected)."""
    conn = await asyncmy.connect(**_connect_args(dsn))
    try:
        async with conn.cursor() as cur:
            for sql in statements:
                await cur.execute(sql)
    finally:
        conn.close()


async def probe(dsn: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        await asyncio.wait_for(admin(dsn, "SELECT 1"), PROBE_TIMEOUT + 1)
    except (OSError, TimeoutError, asyncmy.errors.Error) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def unique_database_name(prefix: str = "sidecar_test") -> str:
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


async def create_database(admin_dsn: str, dbname: str) -> str:
    await admin(admin_dsn, f"CREATE DATABASE `{dbname}` CHARACTER SET utf8mb4")
    return with_database(admin_dsn, dbname)


async def drop_database(admin_dsn: str, dbname: str) -> None:
    await admin(admin_dsn, f"DROP DATABASE IF EXISTS `{dbname}`")


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ThrowawayServer:
    """A private ``mariadbd`` in a temp dir, on a free loopback port and its own socket."""

    def __init__(self, *, durable: bool = False, options: Sequence[str] = (),
                 die_with_parent: bool = False) -> None:
        # durable: a commit reaches the OS before it is answered, so it outlives a SIGKILL of
        # mariadbd (kill()); otherwise the log is written once a second.
        self.durable = durable
        # More mariadbd options (e.g. --ssl-cert=…); given after the defaults, they win.
        self.options = tuple(options)
        self.die_with_parent = die_with_parent  # SIGTERM when the starting process ends
        self.port = free_port()
        self._base = Path(tempfile.mkdtemp(prefix="sidecar-mariadb-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/"

    def _bin(self, name: str) -> str:
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
        if found is None:
            raise MariaDBServerError(f"{name} not found: install Debian's mariadb-server")
        return found

    def _user(self) -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []

    def start(self) -> None:
        data = self._base / "data"
        if not data.exists():
            self._install(data)
        self._launch(data)

    def _install(self, data: Path) -> None:
        install = [self._bin("mariadb-install-db"), "--no-defaults", f"--datadir={data}",
                   "--auth-root-authentication-method=normal", "--skip-test-db",
                   *self._user()]
        done = subprocess.run(install, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise MariaDBServerError(f"mariadb-install-db failed: {done.stderr[-2000:]}")

    def _launch(self, data: Path) -> None:
        log = open(self._base / "mariadbd.log", "ab")
        self._proc = subprocess.Popen(
            [self._bin("mariadbd"), "--no-defaults", f"--datadir={data}",
             "--bind-address=127.0.0.1", f"--port={self.port}",
             f"--socket={self._base / 'mariadbd.sock'}", f"--pid-file={self._base / 'pid'}",
             "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
             "--innodb-log-file-size=48M", "--max-connections=500",
             # A test server: a commit need not wait for the disk (nothing here crashes it).
             f"--innodb-flush-log-at-trx-commit={2 if self.durable else 0}", *self.options,
             *self._user()],
            stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if self.die_with_parent else None)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        reason: str | None = "not started"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            reason = run_sync(probe(self.dsn))
            if reason is None:
                return
            time.sleep(0.2)  # polling the server's readiness, bounded by START_TIMEOUT
        tail = (self._base / "mariadbd.log").read_text(errors="replace")[-2000:]
        raise MariaDBServerError(f"mariadbd did not answer ({reason}): {tail}")

    def kill(self) -> None:
        """SIGKILL mariadbd (a hard stop: no shutdown, no flush); :meth:`start` restarts it on
        the same data, on the same port."""
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait(timeout=30)
        self._proc = None

    def cleanup(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        shutil.rmtree(self._base, ignore_errors=True)


@dataclass
class MariaDBServer:
    """A reachable server whose ``admin_dsn`` may create and drop databases; ``throwaway`` is
    set when the suite started it (stopped by ``close()``)."""

    admin_dsn: str
    throwaway: ThrowawayServer | None = None

    def close(self) -> None:
        if self.throwaway is not None:
            self.throwaway.cleanup()
            self.throwaway = None


def find_or_start() -> MariaDBServer:
    """See the module docstring. Raises ``MariaDBServerError`` when nothing works."""
    env_dsn = os.environ.get(ENV_DSN) or None
    if env_dsn:
        reason = run_sync(probe(env_dsn))
        if reason is not None:
            raise MariaDBServerError(f"{ENV_DSN} is not reachable: {reason}")
        return MariaDBServer(env_dsn)
    if run_sync(probe(DEFAULT_DSN)) is None:
        return MariaDBServer(DEFAULT_DSN)
    server = ThrowawayServer()
    try:
        server.start()
    except BaseException:
        server.cleanup()
        raise
    return MariaDBServer(server.dsn, server)


class MariaDBBackdoor:
    """Direct access beside a ``MySQLStore`` under test (``tests.backdoor.Backdoor``'s verbs):
    aging rows, holding a row lock, a second store that gives up on locks after a second
    (``innodb_lock_wait_timeout`` counts whole seconds)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.database = urlsplit(dsn).path.lstrip("/")

    async def _execute(self, sql: str, args: tuple[object, ...]) -> None:
        conn = await asyncmy.connect(db=self.database, **_connect_args(self.dsn))
        try:
            async with conn.cursor() as cur:
                await cur.execute(sql, args)
        finally:
            conn.close()

    async def backdate(self, provider: str, event_id: str, seconds: float) -> None:
        await self._execute("UPDATE webhook_event SET received_at = received_at - %s"
                            " WHERE provider = %s AND event_id = %s",
                            (seconds, provider, event_id))

    async def backdate_nonces(self, provider: str, seconds: float) -> None:
        await self._execute("UPDATE webhook_nonce SET received_at = received_at - %s"
                            " WHERE provider = %s", (seconds, provider))

    async def received_exactly(self, values: list[tuple[int, str, str]]) -> None:
        """Rows' received times set exactly: (microseconds since the epoch, provider, id)."""
        conn = await asyncmy.connect(db=self.database, **_connect_args(self.dsn))
        try:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "UPDATE webhook_event SET received_at = %s * 0.000001"
                    " WHERE provider = %s AND event_id = %s", values)
        finally:
            conn.close()

    @asynccontextmanager
    async def hold_write_lock(self, provider: str, event_id: str) -> AsyncIterator[None]:
        conn = await asyncmy.connect(db=self.database, **_connect_args(self.dsn))
        try:
            await conn.begin()
            async with conn.cursor() as cur:
                await cur.execute("SELECT event_id FROM webhook_event"
                                  " WHERE provider = %s AND event_id = %s FOR UPDATE",
                                  (provider, event_id))
                assert len(await cur.fetchall()) == 1
            yield
            await conn.rollback()
        finally:
            conn.close()

    async def impatient_store(self) -> Any:
        from sidecar.store.mysql import MySQLStore

        return await MySQLStore.connect(self.dsn, lock_timeout=1.0, statement_timeout=2.5)
