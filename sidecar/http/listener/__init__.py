"""The listening sockets: aiohttp's HTTP/1.1 server with the bounds a public endpoint needs,
which aiohttp leaves open or long by default. Both listeners have them: ``listen`` (providers)
and ``admin_listen`` (probes, Prometheus, operators), each with its own connection cap, so
connections held to one cannot use up the files the other needs.

- Bodies are never decompressed (the signature covers the bytes as sent): a ``Content-Encoding``
  is refused by the shell before the body is read, so a compressed bomb costs nothing.
- Headers come in time: a connection must complete its request's headers within
  ``header_read_timeout`` of opening, or of the first byte after its previous answer; a
  kept-alive connection may stay silent ``idle_timeout``. Past either it is closed, unanswered.
- At most ``max_connections`` (``admin_max_connections``) are open. At the cap a new connection
  takes the place of the one idle longest — kept alive since its last answer, or silent since
  it opened — which is closed: connections held open cannot lock out the next sender (a probe,
  a provider). Only while every connection is inside a request is the new one closed instead,
  as soon as it is accepted.
- A failed accept (out of files: EMFILE, ENFILE; or of kernel memory) is counted, and logged as
  one ``accept_failed`` line per burst (:class:`AcceptFailures`), where asyncio would log each
  one with a traceback — up to a hundred per turn of the loop.
- A refused body is not drained: the answer goes out, the write side is closed, and whatever
  the sender still sends is dropped unread for at most ``LINGER`` seconds — the staged close of
  RFC 9112 §9.6, so the sender can read the answer — then the connection is closed.
- A request aiohttp's parser refuses (bad request line, over-long or invalid header, bad
  framing) gets the proxy's JSON 400 and ONE ``rejected`` log line naming a reason; never a
  traceback, and never the request's bytes (which may hold a signature).
- On shutdown: stop accepting, close idle connections, let requests in progress finish until
  a deadline, then cancel them.
- Answers to providers carry no ``Server`` header (:class:`ProviderResponse`): the public
  endpoint does not announce its Python and aiohttp versions.

By concern:

- ``bounds``: :class:`Bounds`, what one listener allows, and the refusals it logs;
- ``server``: :class:`Listener`, the listening socket, its connections (the cap, the one idle
  longest first), its requests, and its part of the graceful stop;
- ``connection``: :class:`BoundedConnection`, one connection: its timers, the staged close,
  the answer to what the parser refuses; and :func:`tracked`, the middleware that marks a
  request as started;
- ``accept``: :class:`AcceptFailures`, failed accepts counted per burst;
- ``response``: :class:`ProviderResponse`, answers without a ``Server`` header; and
  :class:`PreparedResponse`, an answer given again and again (a known duplicate's) written as
  the bytes made the first time, in one call to the transport (:func:`prepared`).
"""

from sidecar.http.listener.accept import AcceptFailures
from sidecar.http.listener.bounds import Bounds
from sidecar.http.listener.connection import BoundedConnection, malformed_reason, tracked
from sidecar.http.listener.response import PreparedResponse, ProviderResponse, Timed, prepared
from sidecar.http.listener.server import Listener

__all__ = ["AcceptFailures", "BoundedConnection", "Bounds", "Listener", "PreparedResponse",
           "ProviderResponse", "Timed", "malformed_reason", "prepared", "tracked"]
