"""Whether this install runs the mypyc-compiled modules (docs/design.md, "Compiled modules")."""

from __future__ import annotations

import importlib.machinery

import sidecar

# The one shared library a compiled build puts every compiled module in (setup.py's group).
LIBRARY = "sidecar.native__mypyc"


def compiled() -> bool:
    """True when this install carries the modules mypyc compiled (any of buildtools/compiled.py's
    groups), False when it is the pure-Python source (the default install, and the fallback)."""
    # Looked for in the package's own folder only: an editable install's finder would answer
    # for another checkout's build.
    spec = importlib.machinery.PathFinder.find_spec(LIBRARY, list(sidecar.__path__))
    origin = (spec.origin or "") if spec is not None else ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
