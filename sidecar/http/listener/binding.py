"""Listening sockets bound the way asyncio's ``create_server`` binds them: one for every address
a host resolves to, ``SO_REUSEADDR``, IPv6 sockets IPv6-only."""

from __future__ import annotations

import socket
from collections.abc import Iterable

from sidecar.config.model import Address


def bind_sockets(address: Address, count: int = 1, *,
                 reuse_port: bool = False) -> list[list[socket.socket]]:
    """``count`` sets of sockets, each set bound to every address ``address`` resolves to
    (``localhost`` may be ``127.0.0.1`` and ``::1``), all on the port the first one gets (a
    port 0 is chosen once, so every address of a listener shares one port; ``reuse_port``,
    needed for more than one set). They do not listen yet. Raises ``OSError`` naming the
    address that could not be bound; nothing stays open then."""
    resolved = socket.getaddrinfo(address.host or None, address.port, type=socket.SOCK_STREAM,
                                  flags=socket.AI_PASSIVE)
    targets = list(dict.fromkeys((family, kind, proto, sockaddr)
                                 for family, kind, proto, _, sockaddr in resolved))
    port = address.port
    sets: list[list[socket.socket]] = []
    try:
        for _ in range(count):
            sockets: list[socket.socket] = []
            sets.append(sockets)
            for family, kind, proto, sockaddr in targets:
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:  # as asyncio binds: IPv6 only
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                target = (sockaddr[0], port, *sockaddr[2:])
                try:
                    sock.bind(target)
                except OSError as exc:  # asyncio's words, which name the address
                    raise OSError(exc.errno, f"error while attempting to bind on address "
                                  f"{target[:2]!r}: {exc.strerror}") from None
                port = sock.getsockname()[1]  # a port 0 is now the port the others bind
    except BaseException:
        close_all(sock for sockets in sets for sock in sockets)
        raise
    return sets


def close_all(sockets: Iterable[socket.socket]) -> None:
    for sock in sockets:
        sock.close()
