"""``store.url`` for MySQL and MariaDB: ``mysql://USER:PASSWORD@HOST:PORT/DATABASE?OPTIONS``
(``mariadb://`` alike), read once here for ``check-config`` and the store alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

# URL options (?name=value): the only ones accepted.
OPTIONS: Final = frozenset({"unix_socket", "connect_timeout", "ssl", "ssl_ca"})
SCHEMES: Final = ("mysql", "mariadb")


@dataclass(frozen=True)
class Target:
    """Where to connect, from a ``mysql://`` or ``mariadb://`` URL."""

    host: str
    port: int
    user: str
    password: str
    database: str
    unix_socket: str | None = None
    connect_timeout: float | None = None
    ssl: bool = False
    ssl_ca: str | None = None  # the CA bundle the server's certificate is verified against

    def __repr__(self) -> str:  # never the password
        return f"Target({self.user}@{self.host}:{self.port}/{self.database})"


def parse_url(url: str) -> Target:
    """The connection target of ``url``; raises ``ValueError`` saying what to change."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"expected mysql:// or mariadb://, got {parts.scheme!r}://")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise ValueError("name the database in the URL's path: mysql://user@host:3306/DBNAME")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ValueError(f"unknown URL option {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(OPTIONS))}")
    timeout = None
    if "connect_timeout" in options:
        try:
            timeout = float(options["connect_timeout"])
        except ValueError:
            raise ValueError("connect_timeout must be seconds, e.g. connect_timeout=5") from None
        if timeout <= 0:
            raise ValueError("connect_timeout must be > 0")
    ssl_ca = options.get("ssl_ca") or None
    ssl = options.get("ssl", "true" if ssl_ca else "false").lower()
    if ssl not in ("true", "false"):
        raise ValueError("ssl must be true or false")
    if ssl_ca and ssl == "false":
        raise ValueError("ssl_ca verifies the server over TLS: drop ssl=false")
    try:
        port = parts.port or 3306
    except ValueError:
        raise ValueError("the URL's port must be a number from 1 to 65535") from None
    return Target(host=parts.hostname or "127.0.0.1", port=port,
                  user=unquote(parts.username or "root"),
                  password=unquote(parts.password or ""), database=database,
                  unix_socket=options.get("unix_socket") or None, connect_timeout=timeout,
                  ssl=ssl == "true", ssl_ca=ssl_ca)


