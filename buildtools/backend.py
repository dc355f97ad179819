"""The build backend: setuptools' own, with mypy (mypyc) and the package's runtime
dependencies added to the build requirements only when a compiled build is asked for
(``WEBHOOK_SIDECAR_COMPILE``), so the default install of the pure-Python package neither
fetches mypy nor needs a C compiler. pyproject.toml names this module (``backend-path``);
setup.py does the compiling."""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the hooks we do not change)
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_sdist,
)

VARIABLE = "WEBHOOK_SIDECAR_COMPILE"
# The mypy the lint uses (the test extras'): the compiled code is what it type-checks.
MYPYC = "mypy[mypyc]==2.4.1"


def _compiling() -> list[str]:
    """What a compiled build needs beside setuptools: mypy, and the runtime dependencies.
    mypyc type-checks the compiled modules with everything they import, as the lint does; in
    pip's isolated build environment, without aiohttp, structlog, prometheus-client or
    cryptography installed there, that check fails (and the types mypyc compiles against would
    not be the ones the lint checked)."""
    pyproject = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))
    return [MYPYC, *pyproject["project"]["dependencies"]]


@contextlib.contextmanager
def _requirements() -> Iterator[list[str]]:
    """Extra requirements for this build. setuptools runs setup.py to ask it for its own (and
    for the metadata): it runs it as a pure build, which declares the same ones, without mypy
    installed yet and without compiling twice."""
    selection = os.environ.pop(VARIABLE, None)
    try:
        yield _compiling() if (selection or "").strip() not in ("", "0") else []
    finally:
        if selection is not None:
            os.environ[VARIABLE] = selection


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    with _requirements() as extra:
        return [*_setuptools.get_requires_for_build_wheel(config_settings), *extra]


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None
                                    ) -> list[str]:
    with _requirements() as extra:
        return [*_setuptools.get_requires_for_build_editable(config_settings), *extra]


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: dict[str, Any] | None = None) -> str:
    with _requirements():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory: str,
                                        config_settings: dict[str, Any] | None = None) -> str:
    with _requirements():
        return _setuptools.prepare_metadata_for_build_editable(metadata_directory,
                                                               config_settings)
