"""The event loop every ``webhook-sidecar`` process runs on, chosen in one place.

``WEBHOOK_SIDECAR_LOOP`` (read once, at the start of the command):

- ``auto`` (the default): uvloop's loop when uvloop is installed, asyncio's otherwise;
- ``uvloop``: uvloop's loop, or the command refuses to start if uvloop is not installed;
- ``asyncio``: asyncio's own loop, whatever is installed.

Why uvloop is the default, and what the proxy does so that both loops behave alike, is in
``docs/design.md`` ("The event loop").
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Final, Literal, TypeVar

from sidecar.core.errors import ConfigError

LOOP_ENV: Final = "WEBHOOK_SIDECAR_LOOP"
CHOICES: Final = ("auto", "uvloop", "asyncio")

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


@dataclass(frozen=True, slots=True)
class EventLoop:
    """The loop chosen: its name, its version (uvloop's), and what makes one (None: asyncio's
    own, as ``asyncio.run`` makes it)."""

    name: Literal["uvloop", "asyncio"]
    version: str
    factory: LoopFactory | None

    def __str__(self) -> str:
        return f"{self.name} {self.version}" if self.version else self.name


_ASYNCIO: Final = EventLoop("asyncio", "", None)


def choose(environ: Mapping[str, str] | None = None) -> EventLoop:
    """The loop ``WEBHOOK_SIDECAR_LOOP`` names (``auto`` when unset or empty). Raises
    :class:`ConfigError` for a value that is not one of :data:`CHOICES`, and for ``uvloop``
    when uvloop cannot be imported."""
    env = os.environ if environ is None else environ
    wanted = env.get(LOOP_ENV, "").strip().lower() or "auto"
    if wanted not in CHOICES:
        raise ConfigError(LOOP_ENV, f"{env[LOOP_ENV]!r} is not one of {', '.join(CHOICES)}")
    if wanted == "asyncio":
        return _ASYNCIO
    try:
        uvloop = import_module("uvloop")
    except ImportError as exc:
        if wanted == "auto":
            return _ASYNCIO
        raise ConfigError(LOOP_ENV, "uvloop is not installed (pip install uvloop), "
                          f"or set {LOOP_ENV}=asyncio: {exc}") from exc
    factory: LoopFactory = uvloop.new_event_loop
    return EventLoop("uvloop", str(getattr(uvloop, "__version__", "")), factory)


def run(main: Coroutine[Any, Any, T], loop: EventLoop | None = None) -> T:
    """``asyncio.run(main)`` on ``loop`` (by default the one :func:`choose` returns)."""
    chosen = choose() if loop is None else loop
    with asyncio.Runner(loop_factory=chosen.factory) as runner:
        return runner.run(main)


def running() -> str:
    """The running loop, as the ``listening`` line names it: ``uvloop 0.23.0`` or
    ``asyncio``."""
    kind = type(asyncio.get_running_loop())
    if kind.__module__.partition(".")[0] != "uvloop":
        return "asyncio"
    version = getattr(import_module("uvloop"), "__version__", "")
    return f"uvloop {version}".strip()
