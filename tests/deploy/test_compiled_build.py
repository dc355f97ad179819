"""The compiled build's switches (CONTRIBUTING.md, "The compiled build"): the module list
names real, strictly typed modules; the build backend asks for mypy only when a compiled build
is asked for, and then for the mypy the lint runs and the runtime dependencies it type-checks
against; a compiled wheel builds in pip's isolated environment from a clean checkout, as the
image's build does. Whether the running code is the build the suite was asked to test:
tests/acceptance/test_cli.py (``--version``)."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support import REPO

# The list as setup.py reads it (buildtools/ is no package: loaded from its file).
_spec = importlib.util.spec_from_file_location("compiled", REPO / "buildtools" / "compiled.py")
assert _spec is not None and _spec.loader is not None
compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compiled)
GROUPS, modules = compiled.GROUPS, compiled.modules
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_listed_module_is_a_strictly_typed_source_file() -> None:
    listed = modules("1")
    assert len(listed) == len(set(listed)) and listed
    strict = PYPROJECT["tool"]["mypy"]
    assert strict["strict"] is True and strict["files"] == ["sidecar"]
    for module in listed:
        base = REPO.joinpath(*module.split("."))
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        assert path.is_file(), module
        ast.parse(path.read_text(encoding="utf-8"))  # a Python source file, not a stub


def test_the_selection_reads_all_some_or_none() -> None:
    assert modules("") == modules("0") == []
    assert modules("1") == [m for group in GROUPS.values() for m in group]
    assert modules("core") == GROUPS["core"]
    assert modules(" delivery,core ") == GROUPS["delivery"] + GROUPS["core"]
    with pytest.raises(SystemExit, match="unknown group"):
        modules("core,hot")


def build_requirements(selection: str | None) -> list[str]:
    """What the in-tree backend asks pip to install for a wheel build, in a subprocess run
    from the repository as pip runs it (setuptools runs setup.py)."""
    env = {k: v for k, v in os.environ.items() if k != "WEBHOOK_SIDECAR_COMPILE"}
    if selection is not None:
        env["WEBHOOK_SIDECAR_COMPILE"] = selection
    code = ("import json, sys; sys.path.insert(0, 'buildtools'); import backend; "
            "print(json.dumps(backend.get_requires_for_build_wheel()))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120, check=True)
    requirements: list[str] = json.loads(result.stdout.splitlines()[-1])
    return requirements


def test_mypy_is_a_build_requirement_only_when_compiling() -> None:
    assert PYPROJECT["build-system"]["backend-path"] == ["buildtools"]
    pure = build_requirements(None)
    assert not any(Requirement(r).name == "mypy" for r in pure)
    assert build_requirements("0") == pure
    compiled = build_requirements("1")
    [mypy] = [Requirement(r) for r in compiled if Requirement(r).name == "mypy"]
    # The mypy the lint runs (the test extras') is the one that compiles.
    [lint] = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]
              if Requirement(r).name == "mypy"]
    [pin] = mypy.specifier
    assert pin.operator == "==" and "mypyc" in mypy.extras
    assert lint.specifier.contains(pin.version)
    # mypyc type-checks what the compiled modules import, as the lint does: in pip's isolated
    # build environment only what the backend asks for is there.
    assert set(PYPROJECT["project"]["dependencies"]) <= set(compiled)
    assert set(compiled) - set(pure) == {str(mypy), *PYPROJECT["project"]["dependencies"]}


def checkout_copy(target: Path) -> Path:
    """The checkout's files as git knows them (tracked, and new ones not ignored), as CI and
    the image's build see it: no in-place .so, no build/ folder from an earlier compile."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # not a file deleted but not yet committed
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.mark.timeout(900)
def test_a_compiled_wheel_builds_in_an_isolated_environment(tmp_path: Path) -> None:
    """``WEBHOOK_SIDECAR_COMPILE=GROUP pip wheel .``, in pip's isolated build environment (the
    image's ``pip install --no-deps .`` builds the same way): the wheel holds an extension for
    each of the group's modules, the shared library, and every module's source (the
    fallback). The smallest group, to keep it to a minute on two cores."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail("no C compiler: the compiled build cannot be tested")
        pytest.skip("no C compiler (apt-get install gcc)")
    group = min(GROUPS, key=lambda name: len(GROUPS[name]))
    source = checkout_copy(tmp_path / "src")
    # pip from a new virtualenv, as on a first install: mypy also looks for what the modules
    # import in the virtualenv pip runs from, and in ours it would find the dependencies.
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    env = {**os.environ, "WEBHOOK_SIDECAR_COMPILE": group}
    pip = [str(tmp_path / "venv" / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                    "-w", str(tmp_path / "dist"), "."],
                   cwd=source, env=env, check=True, timeout=840)
    [wheel] = (tmp_path / "dist").glob("webhook_sidecar-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    extensions = {name.removesuffix(suffix).replace("/", ".") for name in names
                  if name.endswith(suffix)}
    assert extensions == {*GROUPS[group], "sidecar.native__mypyc"}
    sources = {name.removesuffix(".py").replace("/", ".") for name in names
               if name.endswith(".py")}
    assert set(modules("1")) <= sources


def _source(module: str) -> ast.Module:
    path = REPO.joinpath(*module.split(".")).with_suffix(".py")
    return ast.parse(path.read_text(encoding="utf-8"))


def _bare_raise_after_await(handler: ast.ExceptHandler) -> bool:
    """Whether the handler's body re-raises with a bare ``raise`` after an ``await`` (in
    source order), which compiled by mypyc re-raises a lost exception and crashes."""
    awaits = [n.lineno for n in ast.walk(handler) if isinstance(n, ast.Await)]
    if not awaits:
        return False
    first_await = min(awaits)
    return any(isinstance(n, ast.Raise) and n.exc is None and n.lineno > first_await
               for n in ast.walk(handler))


def test_no_listed_module_re_raises_bare_after_an_await() -> None:
    found = [f"{module}:{handler.lineno}" for module in modules("1")
             for handler in ast.walk(_source(module))
             if isinstance(handler, ast.ExceptHandler) and _bare_raise_after_await(handler)]
    assert found == [], "name the exception: except E as exc: ... raise exc"


def test_the_secret_decoding_module_stays_uncompiled() -> None:
    # Compiled, `raise ... from None` keeps the context: a codec error may quote the secret.
    assert "sidecar.core.signing.keys" not in modules("1")
    assert "raise ConfigError" in (REPO / "sidecar/core/signing/keys.py").read_text()
