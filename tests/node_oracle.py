"""The ``node_oracle`` fixture: Node.js packages as independent oracles (the providers' own,
and ``standardwebhooks``), pinned in ``tests/node/package.json`` + ``package-lock.json``,
installed once per session with ``npm ci --prefix tests/node``. Each call runs
``node tests/node/oracle.js`` with one JSON request.

Without node/npm (or when ``npm ci`` cannot fetch the packages) the tests using it are skipped
with the reason; with ``CI=true`` they fail instead, so CI never passes without the oracles.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"

Oracle = Callable[[dict[str, Any]], dict[str, Any]]


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; CI=true requires the Node.js oracles")
    pytest.skip(reason)


def _installed() -> bool:
    marker = NODE_DIR / "node_modules" / ".package-lock.json"
    lock = NODE_DIR / "package-lock.json"
    return marker.exists() and marker.stat().st_mtime >= lock.stat().st_mtime


@pytest.fixture(scope="session")
def node_oracle() -> Oracle:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are needed to run the providers' Node.js packages")
    if not _installed():
        try:
            done = subprocess.run(
                [npm, "ci", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund",
                 "--ignore-scripts", "--loglevel=error"],
                capture_output=True, text=True, timeout=100, check=False)
        except subprocess.TimeoutExpired:
            _unavailable("npm ci --prefix tests/node timed out")
        if done.returncode != 0:
            _unavailable(f"npm ci --prefix tests/node failed: {done.stderr.strip()[-500:]}")

    def call(request: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run([node, str(NODE_DIR / "oracle.js")], input=json.dumps(request),
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    return call
