"""structlog set-up: JSON when not on a TTY, readable on one; stdlib loggers routed through it.

Our own lines (one per delivery, on the hot path) go straight from structlog to the stream: a
level filter decided once, the processors, one write. Library lines come through stdlib
``logging`` and are rendered by the same processors (``ProcessorFormatter``), so both kinds look
alike on the same stream.

Log lines carry provider, event id, outcome, attempt and latencies; never a secret, a signature
or a body: our callers pass none, and a library's line (aiohttp's server and client, asyncpg,
asyncio) is rendered without its exception — only the exception's type is kept — since a
library's exception message or traceback may quote request bytes. Requests the HTTP parser
refuses are logged by the listener, one line each, with a reason and no request data.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

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
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        logger_factory=structlog.WriteLoggerFactory(file=out),
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        # Not cached: structlog.testing.capture_logs must still see loggers made earlier.
        cache_logger_on_first_use=False,
    )
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
