"""``webhook-sidecar check-config`` as an operator runs it: a subprocess, its exit code, and every
problem on stderr, one per line with its file and line, then how many."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO

EXIT_CONFIG = 2

BROKEN = """\
lsten: 0.0.0.0:8080
upstream:
  url: http://127.0.0.1:3000
  timeout: 40s
providers:
  stripe:
    path: /webhooks/stripe
    preset: strype
    secrets: [whsec_inline_secret_value]
  github:
    preset: github
    secrets: [{env: GH_SECRET}]
    lease: 30s
"""


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if name != "GH_SECRET"}
    return subprocess.run([sys.executable, "-m", "sidecar", "check-config", "--config",
                           str(path)], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=env)


def test_every_problem_is_printed_with_its_line_then_the_count(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BROKEN)
    result = check_config(path)
    assert result.returncode == EXIT_CONFIG
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert [line.split(": ", 2)[:2] for line in lines[:-1]] == [
        [f"{path}:1:1", "lsten"],
        [f"{path}:8:5", "providers.stripe.preset"],
        [f"{path}:10:3", "providers.github.path"],
        [f"{path}:12:16", "providers.github.secrets[0].env"],
        [f"{path}:13:5", "providers.github.lease"],
    ]
    assert "did you mean listen?" in lines[0]
    assert "did you mean stripe?" in lines[1]
    assert lines[3].endswith("environment variable GH_SECRET is not set")
    assert lines[4].endswith("to fix, raise providers.github.lease (default 60s) or lower "
                             "upstream.timeout (default 10s)")
    assert lines[-1] == f"5 problems in {path}"
    assert "whsec_inline_secret_value" not in result.stderr


def test_a_yaml_syntax_error_names_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("upstream:\n  url: http://127.0.0.1:3000\n   timeout: 5s\n")
    result = check_config(path)
    assert result.returncode == EXIT_CONFIG
    assert result.stderr.splitlines() == [
        f"{path}:3:11: invalid YAML: mapping values are not allowed here",
        f"1 problem in {path}",
    ]


def test_a_missing_file_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    result = check_config(path)
    assert result.returncode == EXIT_CONFIG
    assert result.stderr.splitlines() == [
        f"cannot read config file {path}: No such file or directory",
        f"1 problem in {path}",
    ]


def test_a_valid_file_prints_its_summary_and_no_problems(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("upstream: {url: http://127.0.0.1:3000}\n"
                    "providers:\n  stripe: {path: /s, preset: stripe, secrets: [whsec_x]}\n")
    result = check_config(path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "config OK" in result.stdout and "stripe: POST /s" in result.stdout
