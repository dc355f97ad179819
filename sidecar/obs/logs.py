"""structlog set-up: JSON when not on a TTY, readable on one; stdlib loggers routed through it.

Log lines carry provider, event id, outcome, attempt and latencies; never a secret, a signature
or a body (callers pass none, and nothing here reads request data).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


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
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
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
