"""The ``pgbouncer`` fixture: Debian's pgbouncer in ``pool_mode=transaction`` on a free loopback
port, in front of the suite's PostgreSQL, started for a test and stopped after it.

When ``pgbouncer`` is missing it is installed with ``apt-get install -y pgbouncer`` (as root,
quietly), as the inspector's browser is. Without it the tests using it are skipped with the
reason; with ``CI=true`` they fail instead, so CI never passes without the pooler tests.
pgbouncer refuses to run as root: as root it runs as the ``postgres`` user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.pgserver import PgServer, _as_postgres_user, free_port

PGBOUNCER = "/usr/sbin/pgbouncer"
START_TIMEOUT = 15.0
POOL_SIZE = 4  # server connections per (database, user): fewer than the clients, as in production


@dataclass(frozen=True)
class PgBouncer:
    port: int
    log_file: Path

    def dsn(self, direct_dsn: str) -> str:
        """``direct_dsn`` (a database of the suite's server) through this pgbouncer."""
        parts = urlsplit(direct_dsn)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; CI=true requires the pgbouncer tests")
    pytest.skip(reason)


def _binary() -> str:
    if not os.access(PGBOUNCER, os.X_OK):
        apt = shutil.which("apt-get")
        if apt is None or os.geteuid() != 0:
            _unavailable(f"{PGBOUNCER} is missing (apt-get install pgbouncer, as root)")
        done = subprocess.run([apt, "install", "-y", "-q", "pgbouncer"], capture_output=True,
                              text=True, timeout=600, check=False,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode != 0 or not os.access(PGBOUNCER, os.X_OK):
            _unavailable(f"apt-get install pgbouncer failed: {done.stderr.strip()[-300:]}")
    return PGBOUNCER


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def pgbouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    binary = _binary()
    server = urlsplit(pg_server.admin_dsn)
    user = server.username or "postgres"
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="sidecar-pgbouncer-"))
    work.chmod(0o755)
    (work / "users.txt").write_text(f'"{user}" ""\n')
    ini = work / "pgbouncer.ini"
    ini.write_text(f"""\
[databases]
* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {work / 'users.txt'}
pool_mode = transaction
default_pool_size = {POOL_SIZE}
max_client_conn = 500
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = {work / 'pgbouncer.log'}
""")
    prefix: list[str] = []
    if os.geteuid() == 0:
        prefix = _as_postgres_user()
        shutil.chown(work, "postgres")
        for path in work.iterdir():
            shutil.chown(path, "postgres")
    proc = subprocess.Popen([*prefix, binary, str(ini)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _accepts(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (work / "pgbouncer.log")
                pytest.fail(f"pgbouncer did not start: "
                            f"{log.read_text()[-1000:] if log.exists() else 'no log'}")
            time.sleep(0.05)  # polling the port it is to listen on
        yield PgBouncer(port, work / "pgbouncer.log")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)
