"""What the tracing keys and the OTEL_* variables they fall back to may say, as an operator finds
out: ``check-config`` and ``run`` as subprocesses, exit code 2 and one clear line naming the key
(with its file:line) or the variable, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, base_config, write_config

EXIT_CONFIG = 2
TRACED = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}


def cli(command: str, path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-m", "sidecar", command, "--config", str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=30,
                          env={**clean, **env})


def config(tmp_path: Path, **tracing: Any) -> Path:
    data = base_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'events.db'}")
    if tracing:
        data["tracing"] = tracing
    return write_config(tmp_path, data)


@pytest.mark.parametrize("command", ["check-config", "run"])
@pytest.mark.parametrize(("env", "named"), [
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0,5"},
     "$OTEL_TRACES_SAMPLER_ARG is '0,5': it must be a number from 0 to 1"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
     "$OTEL_TRACES_SAMPLER_ARG is '2'"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "$OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc'"),
    ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
      "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
     "$OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is 'http/json'"),
    ({"OTEL_TRACES_EXPORTER": "console"}, "$OTEL_TRACES_EXPORTER is 'console'"),
    ({"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "lots"}, "$OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"),
], ids=["sampler-arg-not-a-number", "sampler-arg-over-1", "grpc", "traces-http-json",
        "console-exporter", "length-limit"])
def test_a_variable_the_proxy_cannot_honour_is_a_config_error(
    tmp_path: Path, command: str, env: dict[str, str], named: str,
) -> None:
    result = cli(command, config(tmp_path), {**TRACED, **env})
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_a_bad_sampler_arg_in_the_file_names_its_line(tmp_path: Path, command: str) -> None:
    path = config(tmp_path, sampler="traceidratio", sampler_arg="half")
    result = cli(command, path, {})
    assert result.returncode == EXIT_CONFIG, result.stderr
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                if text.strip().startswith("sampler_arg:"))
    assert f"{path}:{line}:" in result.stderr
    assert "tracing.sampler_arg: must be a number from 0 to 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_untraced_the_variables_are_not_read(tmp_path: Path) -> None:
    result = cli("check-config", config(tmp_path), {"OTEL_TRACES_SAMPLER_ARG": "0,5",
                                                    "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert result.returncode == 0, result.stderr


def test_no_traces_exporter_turns_tracing_off_unless_the_key_turns_it_on(tmp_path: Path) -> None:
    env = {**TRACED, "OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert cli("check-config", config(tmp_path), env).returncode == 0
    result = cli("check-config", config(tmp_path, enabled=True), env)
    assert result.returncode == EXIT_CONFIG
    assert "$OTEL_TRACES_EXPORTER is 'none'" in result.stderr


def test_the_variables_the_proxy_honours_pass(tmp_path: Path) -> None:
    result = cli("check-config", config(tmp_path), {
        **TRACED, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_TRACES_EXPORTER": "otlp", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "1024",
        "OTEL_BSP_MAX_QUEUE_SIZE": "100"})
    assert result.returncode == 0, result.stderr
