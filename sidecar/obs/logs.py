"""structlog set-up: JSON when not on a TTY, readable on one; stdlib loggers routed through it.

Our own lines go straight from structlog to the stream: a level filter decided once, the
processors, one write. The commonest of them, a delivery's ``delivery`` line at info level in
JSON, is written by one precompiled function (``delivery_line``) with the same bytes the chain
would write, while the chain is the one set here; every other line, and that one whenever the
chain is not (a test capturing logs), goes through the chain. Library lines come through stdlib
``logging`` and are rendered by the same processors (``ProcessorFormatter``), so both kinds look
alike on the same stream.

Log lines carry provider, event id, outcome, attempt and latencies; never a secret, a signature
or a body: our callers pass none, and a library's line (aiohttp's server and client, asyncpg,
asyncio) is rendered without its exception — only the exception's type is kept — since a
library's exception message or traceback may quote request bytes. Requests the HTTP parser
refuses are logged by the listener, one line each, with a reason and no request data.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, Final, cast

import structlog
from structlog.typing import EventDict

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def _library_line(_: Any, __: str, event_dict: EventDict) -> EventDict:
    """A stdlib (library) record: named by its logger; its exception named by type only."""
    record = event_dict.get("_record")
    if isinstance(record, logging.LogRecord):
        event_dict["logger"] = record.name
    event_dict.pop("stack_info", None)
    exc_info = event_dict.pop("exc_info", None)
    exc = exc_info[1] if isinstance(exc_info, tuple) else exc_info
    if isinstance(exc, BaseException):
        event_dict["error_type"] = type(exc).__name__
    return event_dict


def configure_logging(level: str = "info", fmt: str = "auto", stream: Any = None) -> None:
    out = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (structlog.processors.JSONRenderer() if use_json
                     else structlog.dev.ConsoleRenderer(colors=out.isatty()))
    processors = [*shared, structlog.processors.format_exc_info, renderer]
    factory = structlog.WriteLoggerFactory(file=out)
    wrapper = structlog.make_filtering_bound_logger(_LEVELS[level])
    structlog.configure(
        processors=processors,
        logger_factory=factory,
        wrapper_class=wrapper,
        # Not cached: structlog.testing.capture_logs must still see loggers made earlier.
        cache_logger_on_first_use=False,
    )
    global _delivery
    _delivery = (_DeliveryLine(processors, renderer, factory, wrapper, out)
                 if use_json and _LEVELS[level] <= logging.INFO else None)
    handler = logging.StreamHandler(out)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        # No ExtraAdder: a library's `extra` (aiohttp's access log) may hold request data.
        foreign_pre_chain=[*shared, _library_line],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS[level])
    # aiohttp's access log would duplicate our canonical per-request line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def get_logger(name: str = "sidecar") -> Any:
    return structlog.get_logger(name)


# -- the delivery line, precompiled ---------------------------------------------------------

_delivery: _DeliveryLine | None = None

# Keys the chain places itself, or that would change its output: such a line takes the chain.
_RESERVED: Final = frozenset({"provider", "result", "status", "latency_ms", "event", "level",
                              "timestamp", "exc_info"})
_encode = json.encoder.encode_basestring_ascii  # what JSONRenderer's json.dumps uses for str
_TAIL: Final = ', "event": "delivery"'
_INFINITY: Final = float("inf")


def delivery_line(provider: str, result: str, status: int | None, latency_ms: float,
                  fields: Mapping[str, object]) -> bool:
    """Write a delivery's ``delivery`` line at info level, as ``log.info("delivery",
    provider=…, result=…, status=…, latency_ms=…, **fields)`` would through the chain
    ``configure_logging`` set, byte for byte, without the chain. False: nothing written (JSON
    is not the format, the level is above info, the chain is not ours now, or a value is not
    a plain str/int/float/bool/None): log it through the chain."""
    line = _delivery
    return line is not None and line.write(provider, result, status, latency_ms, fields)


def _scalar(value: object) -> str | None:
    """``value`` as ``json.dumps`` writes it, for the types whose text it makes itself; None
    for any other (the chain's ``default`` would be asked). Exact types only: a subclass
    (an enum) may render otherwise."""
    kind = type(value)
    if kind is str:
        return str(_encode(cast(str, value)))
    if kind is int:
        return int.__repr__(cast(int, value))
    if kind is float:
        number = cast(float, value)
        if number != number:
            return "NaN"
        if number in (_INFINITY, -_INFINITY):
            return "Infinity" if number > 0 else "-Infinity"
        return float.__repr__(number)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    return None


class _DeliveryLine:
    """The ``delivery`` line's JSON, put together from pieces made once (per provider, per
    result, per field name), valid while structlog's configuration is the one it was made
    for. Mirrors the chain: the call's keys in order, ``event``, the context variables the
    line does not have (``merge_contextvars``), ``level``, ``timestamp``."""

    def __init__(self, processors: list[Any], renderer: Any, factory: Any, wrapper: Any,
                 out: Any) -> None:
        self._processors = processors
        self._renderer = renderer
        self._size = len(processors)
        self._factory = factory
        self._wrapper = wrapper
        self._logger = structlog.WriteLogger(file=out)  # the same lock and write as the chain
        self._heads: dict[str, str] = {}
        self._results: dict[str, str] = {}
        self._keys: dict[str, str] = {}

    def _ours(self) -> bool:
        config = structlog.get_config()
        processors = config["processors"]
        # capture_logs empties and refills the same list: its last one is then the capture.
        return (processors is self._processors and len(processors) == self._size
                and processors[-1] is self._renderer
                and config["wrapper_class"] is self._wrapper
                and config["logger_factory"] is self._factory)

    def write(self, provider: str, result: str, status: int | None, latency_ms: float,
              fields: Mapping[str, object]) -> bool:
        if not self._ours():
            return False
        head = self._heads.get(provider)
        if head is None:
            head = self._heads[provider] = f'{{"provider": {_encode(provider)}, "result": '
        encoded_result = self._results.get(result)
        if encoded_result is None:
            encoded_result = self._results[result] = _encode(result)
        status_text, latency_text = _scalar(status), _scalar(latency_ms)
        if status_text is None or latency_text is None:
            return False
        parts = [head, encoded_result, ', "status": ', status_text, ', "latency_ms": ',
                 latency_text]
        keys = self._keys
        for name, value in fields.items():
            text = _scalar(value)
            if text is None or name in _RESERVED:
                return False
            key = keys.get(name)
            if key is None:
                key = keys[name] = f", {_encode(name)}: "
            parts += (key, text)
        parts.append(_TAIL)
        for name, value in structlog.contextvars.get_contextvars().items():
            if name in fields or name in _RESERVED:
                if name in ("level", "timestamp"):
                    return False  # the chain would overwrite it in its place
                continue  # setdefault: the line's own value stays
            text = _scalar(value)
            if text is None:
                return False
            parts += (f", {_encode(name)}: ", text)
        now = datetime.datetime.now(tz=datetime.UTC).isoformat().replace("+00:00", "Z")
        parts += (', "level": "info", "timestamp": "', now, '"}')
        self._logger.msg("".join(parts))
        return True
