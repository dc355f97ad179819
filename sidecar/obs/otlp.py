"""OTLP/HTTP export of span records (``sidecar.obs.otel.SpanRecord``), sent from the export
thread as the request ``sidecar.obs.otlp_encode`` writes: retries as the OTLP spec says, and
the standard ``OTEL_EXPORTER_OTLP_*`` environment (``from_environment``)."""

from __future__ import annotations

import gzip
import logging
import os
import random
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Final

import requests

from sidecar.obs.otel import SpanRecord
from sidecar.obs.otlp_encode import Encoder

log = logging.getLogger("sidecar.obs.otlp")

_RETRYABLE: Final = frozenset({408, 429, 502, 503, 504})


class OtlpHttp:
    """POSTs encoded spans to an OTLP/HTTP traces endpoint (``application/x-protobuf``), from
    the export thread. A 2xx is taken; a redirect is not followed (it would turn the POST into a
    GET) and fails. An answer the OTLP spec calls retryable (408, 429, 502, 503, 504), a
    connection that failed or an answer that timed out is tried again, after the collector's
    ``Retry-After`` (429, 503) or backing off exponentially, until ``timeout`` seconds from the
    first try have passed; a try that hangs gets half the time left, so a retry has some.
    After ``stop`` each export is tried once. ``export``: whether the collector took them."""

    def __init__(self, encoder: Encoder, endpoint: str, headers: Mapping[str, str], *,
                 timeout: float, compression: str | None = None,
                 certificate: str | None = None,
                 client_cert: tuple[str, str] | str | None = None) -> None:
        self._encoder = encoder
        self.endpoint = endpoint
        self.timeout = timeout
        self._compression = compression
        self.headers = dict(headers)
        self._session = requests.Session()
        self._session.headers.update({"Content-Type": "application/x-protobuf", **headers})
        if compression:
            self._session.headers["Content-Encoding"] = compression
        if certificate:
            self._session.verify = certificate
        if client_cert:
            self._session.cert = client_cert
        self._stopped = threading.Event()

    def export(self, records: Sequence[SpanRecord]) -> bool:
        body = self._encoder.encode(records)
        if self._compression == "gzip":
            body = gzip.compress(body, compresslevel=1)
        elif self._compression == "deflate":
            body = zlib.compress(body, 1)
        deadline = time.monotonic() + self.timeout
        backoff = 1.0
        while True:
            left = deadline - time.monotonic()
            try_for = left if self._stopped.is_set() else left / 2
            wait: float | None = None
            try:
                response = self._session.post(self.endpoint, data=body,
                                              timeout=max(try_for, 0.1), allow_redirects=False)
            except requests.exceptions.RequestException as exc:
                retry = isinstance(exc, requests.exceptions.ConnectionError
                                   | requests.exceptions.Timeout)
                why = str(exc)
            else:
                if 200 <= response.status_code < 300:
                    return True
                retry, why = response.status_code in _RETRYABLE, f"HTTP {response.status_code}"
                if response.status_code in (429, 503):
                    wait = retry_after(response.headers.get("Retry-After"))
            if wait is None:
                wait = backoff * random.uniform(0.8, 1.2)
            if not retry or time.monotonic() + wait >= deadline or self._stopped.is_set():
                log.warning("exporting %d spans to %s failed: %s", len(records),
                            self.endpoint, why)
                return False
            self._stopped.wait(wait)  # stopping ends the wait: no retries then
            backoff *= 2

    def stop(self) -> None:
        self._stopped.set()

    def shutdown(self) -> None:
        self._stopped.set()
        self._session.close()


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP date); None when
    absent or unreadable. The caller bounds it by its deadline."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _first(environ: Mapping[str, str], *names: str) -> str | None:
    return next((environ[name].strip() for name in names if environ.get(name, "").strip()),
                None)


def from_environment(encoder: Encoder, endpoint: str | None, headers: Mapping[str, str],
                     environ: Mapping[str, str] = os.environ) -> OtlpHttp:
    """The exporter the ``tracing:`` block and the standard variables ask for, as the SDK reads
    them: OTEL_EXPORTER_OTLP_[TRACES_]{ENDPOINT, HEADERS, TIMEOUT, COMPRESSION, CERTIFICATE,
    CLIENT_CERTIFICATE, CLIENT_KEY}; the traces one first, a key of the block over both. The
    timeout is in milliseconds, as the OTLP specification says (the Python SDK reads seconds)."""
    from opentelemetry.util.re import parse_env_headers

    def setting(name: str) -> str | None:
        return _first(environ, f"OTEL_EXPORTER_OTLP_TRACES_{name}", f"OTEL_EXPORTER_OTLP_{name}")

    if endpoint is not None:
        url = f"{endpoint.rstrip('/')}/v1/traces"
    elif traces := _first(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        url = traces
    else:
        base = _first(environ, "OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
        url = f"{base.rstrip('/')}/v1/traces"
    sent = dict(parse_env_headers(setting("HEADERS") or "", liberal=True))
    sent.update(headers)
    try:
        timeout = float(setting("TIMEOUT") or 10000) / 1000
    except ValueError:
        log.warning("the OTLP timeout is not a number of milliseconds: 10000 (10 s) it is")
        timeout = 10.0
    compression = (setting("COMPRESSION") or "").lower()
    cert, key = setting("CLIENT_CERTIFICATE"), setting("CLIENT_KEY")
    return OtlpHttp(encoder, url, sent, timeout=timeout,
                    compression=compression if compression in ("gzip", "deflate") else None,
                    certificate=setting("CERTIFICATE"),
                    client_cert=(cert, key) if cert and key else cert)
