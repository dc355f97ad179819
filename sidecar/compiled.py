"""Whether this install runs the mypyc-compiled modules (docs/design.md, "Compiled modules")."""

from __future__ import annotations

import importlib.machinery

import sidecar.core.decision


def compiled() -> bool:
    """True when the core's modules are native extensions built by mypyc, False when they are
    the pure-Python source (the default install, and the fallback)."""
    origin = sidecar.core.decision.__file__ or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
