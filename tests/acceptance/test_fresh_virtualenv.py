"""The README's run command in a fresh virtualenv: the checkout installs and its demo passes.

A file of its own: the install takes the longest of any one test, and with ``--dist loadfile``
it then runs beside the other command-line tests instead of after them."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.support import REPO


@pytest.mark.skipif(os.environ.get("SIDECAR_SKIP_FRESH_VENV") == "1",
                    reason="explicitly disabled for a quick local run")
def test_readme_first_command_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    """The README's run command, in a new virtualenv with nothing but this checkout."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # As the README has it: the default (pure) build, even in a run that tests the compiled
    # one (its isolated build: tests/deploy/test_compiled_build.py).
    env = {k: v for k, v in os.environ.items() if k != "WEBHOOK_SIDECAR_COMPILE"}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(REPO)], check=True, timeout=600, cwd=tmp_path, env=env)
    demo = subprocess.run([str(env_dir / "bin" / "webhook-sidecar"), "demo"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "demo OK" in demo.stdout
    assert sys.executable != str(python)
