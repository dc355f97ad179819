"""Only the compiled build lives here; the metadata is in pyproject.toml.

WEBHOOK_SIDECAR_COMPILE=1 compiles the modules buildtools/compiled.py lists with mypyc (the
build backend then asks for mypy); unset, the package is pure Python. docs/design.md,
"Compiled modules"."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "buildtools"))
from compiled import modules  # noqa: E402

selected = modules(os.environ.get("WEBHOOK_SIDECAR_COMPILE", ""))
ext_modules = []
if selected:
    from mypyc.build import mypycify

    def path_of(module: str) -> str:
        base = Path(*module.split("."))
        return str(base / "__init__.py" if (HERE / base).is_dir() else base.with_suffix(".py"))

    # One shared library for all of them (sidecar/native__mypyc, inside the package so an
    # in-place build is found wherever the package is), so calls between compiled modules are
    # native calls; the mypy options are pyproject.toml's [tool.mypy] (strict).
    ext_modules = mypycify([path_of(m) for m in selected], group_name="sidecar.native",
                           opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"))

setup(ext_modules=ext_modules)
