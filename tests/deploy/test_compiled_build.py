"""The compiled build's switches, without compiling (CONTRIBUTING.md, "The compiled build"):
the module list names real, strictly typed modules; the build backend asks for mypy only when
a compiled build is asked for, and then for the mypy the lint runs. Whether the running code
is the build the suite was asked to test: tests/acceptance/test_cli.py (``--version``)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import tomllib

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
