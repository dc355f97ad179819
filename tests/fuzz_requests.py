"""Raw HTTP/1.1 requests as a sender could write them, generated from a seed: every part a
sender controls — method, request target (%-escapes, raw non-ASCII bytes, dot segments,
absolute form), query, header names and values (bytes 0x80-0xFF, NUL, huge values, many
headers), body bytes and framing (bad, doubled or missing Content-Length, chunked oddities,
other transfer codings, odd versions, bare LF). A share are deliveries stripe verifies (their
other headers and query fuzzed), a share GETs of the inspector's and the admin API's listings
with their query fuzzed (``tests/acceptance/test_fuzz_senders.py`` sends them)."""

from __future__ import annotations

import contextlib
import json
import random
from dataclasses import dataclass

from tests.support import stripe_headers

PROVIDER_PATHS = (b"/webhooks/stripe", b"/webhooks/github", b"/webhooks/slack")


@dataclass(frozen=True)
class Fuzzed:
    """One generated request: its bytes, and what they were made of."""

    index: int
    kind: str  # signed, unsigned, inspector
    data: bytes
    method: bytes = b""
    target: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    half_close: bool = False  # the request is left incomplete: the sender stops writing

    def header(self, name: bytes) -> bytes | None:
        return next((value for key, value in self.headers if key.lower() == name.lower()),
                    None)

    @property
    def to_provider(self) -> bool:
        """Whether it may reach a provider route (a server span, with tracing on): the
        router's reading of an odd target (dot segments, spaces, absolute form) is not
        guessed here."""
        return self.kind != "inspector"


ODD_METHODS = (b"GET", b"PUT", b"HEAD", b"OPTIONS", b"DELETE", b"PATCH", b"TRACE", b"post",
               b"P\xd3ST", b"FOO", b"M-SEARCH", b"PRI", b"CONNECT", b"A" * 300, b"PO ST",
               b"POST\x00", b"")
ESCAPES = (b"%00", b"%ff", b"%FF", b"%2e%2e", b"%2F", b"%zz", b"%", b"%c3%a9", b"%e2%80%a8",
           b"%25", b"%3F", b"%23", b"%0d%0a")
RAW_BYTES = (b"\xff", b"\x80", "é".encode(), "𝄞".encode(), b"\xc3", b" ", b"\t", b"#", b"?",
             b"\x7f")
HOSTS = (b"sidecar.test", b"127.0.0.1", b"sidecar.test:8080", b"a:99999", b"a:x", b"a:-1",
         b"[::1]:80", b"[::1", b"\xff", b"", b"a b", b"xn--", b"a" * 300, "é.test".encode(),
         b"a:65535", b"a:0", b"a:", b":80", b"a:80:80", b"%00")
# The first BENIGN leave a signed delivery verifiable and forwardable; the rest need not.
HEADER_NAMES = (b"X-Fuzz", b"User-Agent", b"Accept", b"Cookie", b"Forwarded", b"X-Forwarded-For",
                b"Traceparent", b"Tracestate", b"X-Request-Id", b"Idempotency-Key",
                b"Content-Type", b"Expect", b"Connection", b"Content-Encoding",
                b"Stripe-Signature", b"X-\xff", b"X Y", b"X\x00", b"", b":", "X-Ü".encode(),
                b"X-" + b"n" * 200)
BENIGN = 10
VALUE_BYTES = bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100)) + b"\t\x00"
ID_PIECES = ("", "é", "/", "%2F", "?", "#", " ", "\u2028", "𝄞", "..", "<b>", "\"'", "\\",
             "x" * 200, "\u0000", "\ud800")


class Generator:
    """Request ``index`` from ``Random(seed, index)`` alone; signatures are made at ``now``
    (Unix seconds: a provider's tolerance applies)."""

    def __init__(self, seed: int, now: int) -> None:
        self.seed = seed
        self.now = now

    def make(self, index: int) -> Fuzzed:
        rng = random.Random(self.seed * 1_000_003 + index)
        roll = rng.random()
        if roll < 0.05:
            return self._inspector(rng, index)
        if roll < 0.35:
            return self._signed(rng, index)
        return self._unsigned(rng, index)

    # -- pieces

    def _value(self, rng: random.Random, clean: float = 0.6) -> bytes:
        if rng.random() < clean:
            return "".join(rng.choice("abc XYZ-_=;,/0123456789") for _ in range(
                rng.randint(0, 20))).encode()
        size = rng.choice((1, 3, 20, 200, 9000, 20000)) if rng.random() < 0.1 else \
            rng.randint(0, 40)
        return bytes(rng.choice(VALUE_BYTES) for _ in range(size)).strip(b" \t")

    def _headers(self, rng: random.Random, clean: float = 0.6) -> list[tuple[bytes, bytes]]:
        count = rng.choice((0, 0, 1, 2, 3, 5)) if rng.random() < 0.97 else 150
        return [(rng.choice(HEADER_NAMES[:BENIGN] if rng.random() < clean else HEADER_NAMES),
                 self._value(rng, clean)) for _ in range(count)]

    def _query(self, rng: random.Random, keys: tuple[str, ...] = ("a", "token", "sig"),
               raw: float = 0.5) -> bytes:
        if rng.random() < 0.6:
            return b""
        pieces = (b"1", b"x", *ESCAPES, b"9" * 30, b"")
        if rng.random() < raw:
            pieces += (*RAW_BYTES, b"\xc2\xb2")
        pairs = []
        for _ in range(rng.randint(1, 4)):
            key = rng.choice(keys).encode()
            value = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 3)))
            pairs.append(key + b"=" + value)
        return b"?" + b"&".join(pairs)

    def _host(self, rng: random.Random) -> list[tuple[bytes, bytes]]:
        roll = rng.random()
        if roll < 0.75:
            return [(b"Host", b"sidecar.test")]
        if roll < 0.8:
            return []
        if roll < 0.83:
            return [(b"Host", b"sidecar.test"), (b"Host", rng.choice(HOSTS))]
        return [(b"Host", rng.choice(HOSTS))]

    def _path(self, rng: random.Random) -> bytes:
        path = rng.choice((*PROVIDER_PATHS, *PROVIDER_PATHS, b"/webhooks/unknown", b"/", b"*",
                           b"/healthz", b"/metrics", b"/admin/events", b"/ui/"))
        roll = rng.random()
        if roll < 0.15:
            path += b"".join(rng.choice(ESCAPES + RAW_BYTES) for _ in range(rng.randint(1, 4)))
        elif roll < 0.2:
            path = rng.choice((b"//", b"/./", b"/../", b"/webhooks/../")) + path.lstrip(b"/")
        elif roll < 0.22:
            path = b"/" + b"a" * rng.choice((300, 9000))
        elif roll < 0.24:
            path = b"http://sidecar.test" + path
        return path + self._query(rng)

    # -- the three kinds

    def _signed(self, rng: random.Random, index: int) -> Fuzzed:
        """A delivery stripe verifies: what else it carries is stored with it."""
        event_id = f"evt_fz_{index}_" + "".join(rng.choice(ID_PIECES)
                                               for _ in range(rng.randint(0, 2)))
        note = "".join(rng.choice(("a", "é", "\u2028", "𝄞", "\"", "\\", "<script>", "\x00"))
                       for _ in range(rng.randint(0, 8)))
        body = json.dumps({"id": event_id, "object": "event", "type": "invoice.paid",
                           "note": note}, ensure_ascii=rng.random() < 0.5).encode(
                               "utf-8", "surrogatepass")
        with contextlib.suppress(UnicodeDecodeError):
            signed = [(name.encode(), value.encode())
                      for name, value in stripe_headers(body, timestamp=self.now).items()]
            headers = [*self._host(rng), *signed, *self._headers(rng, clean=0.85)]
            if rng.random() < 0.1:
                headers.append((b"Transfer-Encoding", b"chunked"))
                framed = _chunked(body)
            else:
                headers.append((b"Content-Length", str(len(body)).encode()))
                framed = body
            target = b"/webhooks/stripe" + self._query(rng, raw=0.1)
            return _fuzzed(index, "signed", b"POST", target, headers, framed)
        return self._unsigned(rng, index)  # a lone surrogate: no signature over it

    def _unsigned(self, rng: random.Random, index: int) -> Fuzzed:
        method = b"POST" if rng.random() < 0.7 else rng.choice(ODD_METHODS)
        target = self._path(rng)
        headers = [*self._host(rng), *self._headers(rng)]
        body = bytes(rng.getrandbits(8) for _ in range(rng.choice((0, 2, 17, 300))))
        if rng.random() < 0.3:
            body = json.dumps({"id": f"evt_u_{index}", "x": rng.random()}).encode()
        framing = rng.choice(("length", "length", "length", "short", "long", "twice", "bad",
                              "chunked", "bad_chunks", "unfinished_chunks", "chunked_length",
                              "other_coding", "none"))
        half_close = False
        if framing == "length":
            headers.append((b"Content-Length", str(len(body)).encode()))
        elif framing == "short":
            headers.append((b"Content-Length", str(max(0, len(body) - 5)).encode()))
        elif framing == "long":
            headers.append((b"Content-Length", str(len(body) + 10).encode()))
            half_close = True
        elif framing == "twice":
            headers += [(b"Content-Length", str(len(body)).encode()),
                        (b"Content-Length", str(len(body) + 1).encode())]
        elif framing == "bad":
            headers.append((b"Content-Length", rng.choice((
                b"abc", b"-1", b"1e3", b" 5", b"0x10", b"9" * 25, b"+2", b"2 2", b""))))
        elif framing == "chunked":
            headers.append((b"Transfer-Encoding", b"chunked"))
            body = _chunked(body)
        elif framing == "bad_chunks":
            headers.append((b"Transfer-Encoding", b"chunked"))
            body = rng.choice((b"zz\r\nab\r\n0\r\n\r\n", b"ffffffffffffffffffff\r\nab\r\n",
                               b"2;ext=\xff\r\nab\r\n0\r\n\r\n", b"2\nab\n0\n\n",
                               b"-1\r\nab\r\n0\r\n\r\n", b"2\r\nabc\r\n0\r\n\r\n",
                               b"0\r\nTrailer: \xff\r\n\r\n"))
        elif framing == "unfinished_chunks":
            headers.append((b"Transfer-Encoding", b"chunked"))
            body = b"5\r\nab"
            half_close = True
        elif framing == "chunked_length":
            headers += [(b"Transfer-Encoding", b"chunked"),
                        (b"Content-Length", str(len(body)).encode())]
            body = _chunked(body)
        elif framing == "other_coding":
            headers.append((b"Transfer-Encoding", rng.choice((
                b"gzip", b"chunked, gzip", b"gzip, chunked", b"identity", b"Chunked",
                b"chunked, chunked", b"\xff"))))
            body = _chunked(body)
        version = b"HTTP/1.1" if rng.random() < 0.9 else rng.choice((
            b"HTTP/1.0", b"HTTP/0.9", b"HTTP/2.0", b"HTTP/1.2", b"HTTP/1.1 x", b"", b"http/1.1"))
        newline = b"\r\n" if rng.random() < 0.95 else b"\n"
        return _fuzzed(index, "unsigned", method, target, headers, body, version=version,
                       newline=newline, half_close=half_close)

    def _inspector(self, rng: random.Random, index: int) -> Fuzzed:
        """A GET of an inspector page or the admin listing, its query fuzzed."""
        path = rng.choice((b"/ui/", b"/ui/login", b"/ui/overview", b"/admin/events"))
        keys = ("provider", "state", "id_prefix", "status", "since", "until", "cursor",
                "limit", "older_than", "notice", "count")
        query = self._query(rng, keys) if rng.random() < 0.5 else (
            b"?notice=bulk&count=" + rng.choice((b"3", b"\xc2\xb2", b"9" * 12, b"1" * 5000,
                                                 b"%C2%B2", b"")))
        return _fuzzed(index, "inspector", b"GET", path + query,
                       [(b"Host", b"127.0.0.1"), *self._headers(rng)[:2]], b"")


def _chunked(body: bytes) -> bytes:
    return (f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n") if body else b"0\r\n\r\n"


def _fuzzed(index: int, kind: str, method: bytes, target: bytes,
            headers: list[tuple[bytes, bytes]], body: bytes, *, version: bytes = b"HTTP/1.1",
            newline: bytes = b"\r\n", half_close: bool = False) -> Fuzzed:
    lines = [b" ".join(part for part in (method, target, version) if part)]
    lines += [name + b": " + value for name, value in headers]
    data = newline.join(lines) + newline + newline + body
    return Fuzzed(index, kind, data, method, target, tuple(headers), half_close)
