"""Node.js packages the tests run, each pinned in a folder of its own (``package.json`` and
``package-lock.json``) and installed there once with ``npm ci``, bounded. Without node and npm,
or when npm cannot fetch the packages, a test that needs them is skipped with the reason; with
``CI=true`` it fails instead, so CI never passes without them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI=true requires it)")
    pytest.skip(reason)


def node_with(folder: Path) -> str:
    """The ``node`` binary, once ``folder``'s pinned packages are installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    where = folder.relative_to(REPO)
    if node is None or npm is None:
        unavailable(f"node and npm are needed for the packages in {where}")
    marker = folder / "node_modules" / ".package-lock.json"
    lock = folder / "package-lock.json"
    if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
        try:
            done = subprocess.run(
                [npm, "ci", "--prefix", str(folder), "--no-audit", "--no-fund",
                 "--ignore-scripts", "--loglevel=error"],
                capture_output=True, text=True, timeout=100, check=False)
        except subprocess.TimeoutExpired:
            unavailable(f"npm ci --prefix {where} timed out")
        if done.returncode != 0:
            unavailable(f"npm ci --prefix {where} failed: {done.stderr.strip()[-500:]}")
    return node
