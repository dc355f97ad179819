"""The ``chromium`` fixture: Debian's chromium for the inspector's browser test, driven by
Playwright without its own browser download (none is reachable from where the suite runs).

When ``/usr/bin/chromium`` is missing it is installed once per session with
``apt-get install -y chromium`` (as root, quietly), as the Node.js oracles are installed when
missing. Without it the tests using it are skipped with the reason; with ``CI=true`` they fail
instead, so CI never passes without the browser test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import NoReturn

import pytest

CHROMIUM = "/usr/bin/chromium"


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}; CI=true requires the inspector's browser test")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser's path (Playwright's ``executable_path``)."""
    try:
        import playwright.async_api  # noqa: F401  (a test dependency: say so when absent)
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        apt = shutil.which("apt-get")
        if apt is None or os.geteuid() != 0:
            _unavailable(f"{CHROMIUM} is missing (apt-get install chromium, as root)")
        try:
            done = subprocess.run([apt, "install", "-y", "-q", "chromium"], capture_output=True,
                                  text=True, timeout=600, check=False,
                                  env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        except subprocess.TimeoutExpired:
            _unavailable("apt-get install chromium timed out")
        if done.returncode != 0 or not os.access(CHROMIUM, os.X_OK):
            _unavailable(f"apt-get install chromium failed: {done.stderr.strip()[-500:]}")
    return CHROMIUM
