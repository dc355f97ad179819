"""Find a PostgreSQL server for the test suite, or start a throwaway one. Never skip.

Order of preference:

1. ``SIDECAR_TEST_PG_DSN`` (a ``postgresql://`` URL to a role allowed to CREATE DATABASE). If it
   is set but unreachable the suite fails: an explicit setting that does not work is an error.
2. ``postgresql://postgres@127.0.0.1:5432/postgres`` (trust auth on the dev machines and CI).
3. A :class:`ThrowawayCluster`: ``initdb`` into a temp dir, started with ``pg_ctl -w`` on a free
   port, torn down at the end of the session.

When none of these works, :func:`find_or_start` raises ``PgServerError`` (the fixtures turn that
into ``pytest.fail``), so a missing database shows up as a red run, never as skipped tests.

``ThrowawayCluster`` is also the tool for fault tests: start a private cluster, crash it with
``stop(mode="immediate")``, ``start()`` it again on the same port and data directory, or hang
it for a while with ``paused()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import glob
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ENV_DSN = "SIDECAR_TEST_PG_DSN"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_CTL_WAIT = 30  # seconds, passed to pg_ctl -t
SUBPROCESS_TIMEOUT = 60.0  # seconds, a hard bound on any initdb / pg_ctl call
PROBE_TIMEOUT = 3.0  # seconds to decide whether a server answers


T = TypeVar("T")


class PgServerError(RuntimeError):
    """No PostgreSQL could be found or started, or a cluster operation failed."""


# -- small helpers ---------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (also: a port nothing listens on)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def with_database(dsn: str, dbname: str) -> str:
    """``dsn`` (a URL) pointing at database ``dbname`` instead."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        raise PgServerError(f"expected a postgresql:// URL, got scheme {parts.scheme!r}")
    return urlunsplit(parts._replace(path="/" + dbname))


def redact(dsn: str) -> str:
    """``dsn`` without its password, for messages."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, on a private event loop.

    Session fixtures are synchronous, but may be set up from inside a running loop (an async
    fixture calling ``request.getfixturevalue``): then the private loop runs on a helper thread.
    Never touches the thread's current-loop slot."""

    def run() -> T:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        finally:
            loop.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pgserver") as pool:
        return pool.submit(run).result()


async def probe(dsn: str, connect_timeout: float = PROBE_TIMEOUT) -> str | None:
    """None if ``dsn`` accepts a connection, else a one-line reason."""
    try:
        conn = await asyncpg.connect(dsn, timeout=connect_timeout)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return f"{type(exc).__name__}: {exc}"
    await conn.close(timeout=connect_timeout)
    return None


_DBNAME = re.compile(r"^[a-z0-9_]+$")


async def create_database(admin_dsn: str, dbname: str) -> str:
    """Create an empty database; return a DSN to it."""
    if not _DBNAME.match(dbname):
        raise ValueError(f"unsafe database name {dbname!r}")
    conn = await asyncpg.connect(admin_dsn, timeout=PROBE_TIMEOUT)
    try:
        await conn.execute(f'CREATE DATABASE "{dbname}"')
    finally:
        await conn.close()
    return with_database(admin_dsn, dbname)


async def drop_database(admin_dsn: str, dbname: str) -> None:
    if not _DBNAME.match(dbname):
        raise ValueError(f"unsafe database name {dbname!r}")
    conn = await asyncpg.connect(admin_dsn, timeout=PROBE_TIMEOUT)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    finally:
        await conn.close()


def unique_database_name(prefix: str = "sidecar_test") -> str:
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


@asynccontextmanager
async def migrated_database(cluster: ThrowawayCluster, prefix: str) -> AsyncIterator[str]:
    """A fresh, migrated database on ``cluster``, dropped afterwards (the cluster is started
    again first if the test crashed it and failed before restarting it)."""
    from sidecar.store.postgres import migrate_postgres

    dbname = unique_database_name(prefix)
    url = await create_database(cluster.dsn, dbname)
    await migrate_postgres(url)
    try:
        yield url
    finally:
        if not cluster.running():
            await asyncio.to_thread(cluster.start)
        await drop_database(cluster.dsn, dbname)


# -- server binaries ---------------------------------------------------------------------------


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path)) or (0,)


def find_bindir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    candidates += [str(Path(p).parent) for p in filter(None, [shutil.which("initdb")])]
    for directory in candidates:
        if all((Path(directory) / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(directory)
    raise PgServerError(
        "no PostgreSQL server binaries found (tried `pg_config --bindir`, "
        "/usr/lib/postgresql/*/bin, PATH); install them (Debian: apt-get install postgresql) "
        f"or set {ENV_DSN} to a running server"
    )


def _postgres_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("postgres")
    except KeyError as exc:
        raise PgServerError(
            "running as root, and there is no `postgres` system user to run initdb and "
            "postgres as (they refuse to run as root); install PostgreSQL's server package"
        ) from exc


def _reachable_by(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` may traverse every directory above ``path`` (mode bits only)."""
    for directory in path.resolve().parents:
        st = directory.stat()
        if st.st_uid == user.pw_uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid == user.pw_gid:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


def _as_postgres_user() -> list[str]:
    """A command prefix that drops root to the ``postgres`` user (initdb/postgres refuse root)."""
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--"]
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
    raise PgServerError("running as root, and neither runuser nor setpriv is available")


# -- a throwaway cluster -----------------------------------------------------------------------


class ThrowawayCluster:
    """A private PostgreSQL cluster on a free port of 127.0.0.1, in ``base_dir`` (default: a new
    temporary directory), reachable over TCP only (no Unix socket, so no path-length limit).

    ``fsync=False`` is faster and fine for a cluster that is only ever stopped cleanly; keep the
    default (``True``) for any cluster a test crashes with ``stop(mode="immediate")``.
    ``settings`` adds ``-c name=value`` server settings. As root, ``initdb`` and ``postgres`` run
    as the ``postgres`` system user (they refuse root); if that user cannot reach ``base_dir``
    (pytest's ``tmp_path`` is private to root), the files go to a temporary directory instead.
    """

    def __init__(
        self,
        base_dir: Path | str | None = None,
        *,
        fsync: bool = True,
        bindir: Path | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.requested_dir = Path(base_dir) if base_dir is not None else None
        self.fsync = fsync
        self.bindir = bindir
        self.settings = dict(settings or {})
        self.base_dir: Path | None = None
        self.port = 0
        self._initialised = False
        self._owns_base = False

    def __repr__(self) -> str:
        return f"<ThrowawayCluster port={self.port} dir={self.base_dir}>"

    # paths -------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self._base / "data"

    @property
    def log_file(self) -> Path:
        return self._base / "server.log"

    @property
    def _base(self) -> Path:
        if self.base_dir is None:
            raise PgServerError("cluster not initialised: call start()")
        return self.base_dir

    @property
    def dsn(self) -> str:
        if not self.port:
            raise PgServerError("cluster has no port yet: call start()")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """initdb on first use, then start and wait until it accepts connections. Restarting
        after ``stop()`` reuses the data directory and the port (so ``dsn`` stays valid)."""
        if not self._initialised:
            self._init()
        if self.port:
            self._pg_ctl_start()
            return
        last: PgServerError | None = None
        for _ in range(3):  # the free port may be taken by someone else before we bind it
            self.port = free_port()
            try:
                self._pg_ctl_start()
                return
            except PgServerError as exc:
                last = exc
        self.port = 0
        raise last or PgServerError("could not start the cluster")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m fast|smart|immediate``; ``immediate`` is a crash (no checkpoint)."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"unknown stop mode {mode!r}")
        if not self.running():
            return
        self._run(self._pg_ctl("stop", "-m", mode, "-w", "-t", str(PG_CTL_WAIT)))

    def running(self) -> bool:
        if not self._initialised or not (self.data_dir / "postmaster.pid").exists():
            return False
        result = self._run(self._pg_ctl("status"), check=False)
        return result.returncode == 0

    def cleanup(self) -> None:
        """Stop the server (immediately) and delete its files. Safe to call twice."""
        try:
            if self._initialised:
                self.stop(mode="immediate")
        finally:
            if self.base_dir is not None:
                if self._owns_base:
                    shutil.rmtree(self.base_dir, ignore_errors=True)
                else:
                    shutil.rmtree(self.base_dir / "data", ignore_errors=True)
            self.base_dir = None
            self._initialised = False
            self._owns_base = False
            self.port = 0

    def pids(self) -> list[int]:
        """The postmaster's pid and its children's (backends and auxiliary processes)."""
        postmaster = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        children = []
        for proc_stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = proc_stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # the process ended while we looked
                continue
            if int(fields[1]) == postmaster:
                children.append(int(proc_stat.parent.name))
        return [postmaster, *children]

    @contextmanager
    def paused(self) -> Iterator[None]:
        """A hung server: SIGSTOP the postmaster and every process it started, SIGCONT them on
        the way out. Connections stay open and connects are accepted by the kernel, but nothing
        answers. A backend started while paused is not stopped (none is: the postmaster forks
        them, and it is stopped first)."""
        stopped: list[int] = []
        try:
            for pid in self.pids():
                with suppress(ProcessLookupError):  # a child that has just exited
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            yield
        finally:
            for pid in stopped:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def __enter__(self) -> ThrowawayCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    # internals -----------------------------------------------------------------------------
    def _init(self) -> None:
        if self.bindir is None:
            self.bindir = find_bindir()
        user = _postgres_user() if os.geteuid() == 0 else None
        base = self.requested_dir
        if base is not None and not base.exists():
            base.mkdir(parents=True)
            self._owns_base = True
        if base is None or (user is not None and not _reachable_by(base, user)):
            base = Path(tempfile.mkdtemp(prefix="sidecar-pg-"))
            self._owns_base = True
        self.base_dir = base
        if user is not None:
            os.chown(base, user.pw_uid, user.pw_gid)
            os.chmod(base, 0o700)
        self._run(
            [
                str(self._bin("initdb")),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ]
        )
        self._initialised = True

    def _server_options(self) -> list[str]:
        options = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": "",  # TCP only
            "fsync": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "max_connections": "100",
            "logging_collector": "off",
        }
        options.update(self.settings)
        # pg_ctl hands -o to a shell: quote each setting.
        return [f"-c {shlex.quote(f'{name}={value}')}" for name, value in options.items()]

    def _pg_ctl_start(self) -> None:
        command = self._pg_ctl(
            "start",
            "-w",
            "-t",
            str(PG_CTL_WAIT),
            "-l",
            str(self.log_file),
            "-o",
            " ".join(self._server_options()),
        )
        result = self._run(command, check=False)
        if result.returncode != 0:
            raise PgServerError(
                f"pg_ctl start failed ({result.returncode}): {result.stderr.strip()}\n"
                f"--- server log tail ---\n{self._log_tail()}"
            )

    def _pg_ctl(self, *args: str) -> list[str]:
        return [str(self._bin("pg_ctl")), "-D", str(self.data_dir), *args]

    def _bin(self, tool: str) -> Path:
        assert self.bindir is not None
        return self.bindir / tool

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _run(self, argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if os.geteuid() == 0:
            command = [*_as_postgres_user(), *command]
        try:
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_TIMEOUT,
                stdin=subprocess.DEVNULL,
                cwd=self._base,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PgServerError(f"{' '.join(command)}: {exc}") from exc
        if check and result.returncode != 0:
            raise PgServerError(
                f"{' '.join(command)} exited {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result


# -- finding or starting ---------------------------------------------------------------------


@dataclass
class PgServer:
    """A reachable server: ``admin_dsn`` may create and drop databases. ``cluster`` is set when
    the suite started the server itself (and will stop it on ``close()``)."""

    admin_dsn: str
    cluster: ThrowawayCluster | None = None

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.cleanup()
            self.cluster = None


def find_or_start(
    *, env_dsn: str | None = None, default_dsn: str | None = None, fsync: bool = False
) -> PgServer:
    """See the module docstring. ``env_dsn`` defaults to ``$SIDECAR_TEST_PG_DSN``.
    Raises ``PgServerError`` when nothing works (callers fail the run; they never skip)."""
    if env_dsn is None:
        env_dsn = os.environ.get(ENV_DSN) or None
    if env_dsn:
        reason = run_sync(probe(env_dsn))
        if reason is not None:
            raise PgServerError(f"{ENV_DSN}={redact(env_dsn)} is not reachable: {reason}")
        return PgServer(env_dsn)
    if default_dsn is None:
        default_dsn = DEFAULT_DSN
    if run_sync(probe(default_dsn)) is None:
        return PgServer(default_dsn)
    cluster = ThrowawayCluster(fsync=fsync)
    try:
        cluster.start()
        reason = run_sync(probe(cluster.dsn))
        if reason is not None:
            raise PgServerError(f"the throwaway cluster started but does not answer: {reason}")
    except BaseException:
        cluster.cleanup()
        raise
    return PgServer(cluster.dsn, cluster)
