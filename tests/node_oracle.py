"""The ``node_oracle`` fixture: Node.js packages as independent oracles (the providers' own,
and ``standardwebhooks``), pinned in ``tests/node/package.json`` + ``package-lock.json``,
installed once per session with ``npm ci --prefix tests/node``. Each call runs
``node tests/node/oracle.js`` with one JSON request.

Without node/npm (or when ``npm ci`` cannot fetch the packages) the tests using it are skipped
with the reason; with ``CI=true`` they fail instead (``tests/npm_packages.py``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.npm_packages import node_with

NODE_DIR = Path(__file__).resolve().parent / "node"

Oracle = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture(scope="session")
def node_oracle() -> Oracle:
    node = node_with(NODE_DIR)

    def call(request: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run([node, str(NODE_DIR / "oracle.js")], input=json.dumps(request),
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    return call
