"""Secrets as a config gives them: a string, ``{env: NAME}`` or ``{file: PATH}``, one or a list
(rotation); each read, interpolated and decoded with its scheme. Messages name a variable or a
file, never a value."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from sidecar.config.interpolate import interpolate, references
from sidecar.config.keyring import read_secret_file
from sidecar.config.model import SecretRef
from sidecar.config.problems import did_you_mean
from sidecar.config.reading import Load, Unusable, Values
from sidecar.core.errors import ConfigError
from sidecar.core.signing import decode_secret
from sidecar.core.signing.forward import decode_forward_secret


def provider_secrets(raw: object, path: str, values: Values,
                     load: Load) -> tuple[SecretRef, ...]:
    if isinstance(raw, str | dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(path, "must be a non-empty list of secrets (a string, {env: NAME} or "
                          "{file: PATH}); several are accepted at once for rotation")
    found = _secret_values(raw, path, load)
    signature = values["signature"]
    return _decoded(found, path, load, lambda value, where: decode_secret(signature, value,
                                                                          where))


def signing_secrets(raw: object, path: str, values: Values,
                    load: Load) -> tuple[SecretRef, ...]:
    """upstream.signing_secrets: whsec_ secrets that sign every forward (none: unsigned)."""
    if isinstance(raw, str | dict):
        raw = [raw]
    if not isinstance(raw, list):
        raise ConfigError(path, "must be a list of secrets (a string, {env: NAME} or "
                          "{file: PATH}); every one signs each forward (rotation)")
    return _decoded(_secret_values(raw, path, load), path, load, decode_forward_secret)


def _secret_values(raw: list[Any], path: str, load: Load) -> list[tuple[str, str, str]]:
    """(item path, source, secret) for each item; every item is checked (each problem
    reported) before any is decoded."""
    found: list[tuple[str, str, str]] = []
    for i, item in enumerate(raw):
        try:
            found.append((f"{path}[{i}]", *_secret_value(item, f"{path}[{i}]", load)))
        except ConfigError as exc:
            load.report(exc)
    if len(found) < len(raw):
        raise Unusable(path)
    return found


def _decoded(found: list[tuple[str, str, str]], path: str, load: Load,
             decode: Callable[[str, str], bytes]) -> tuple[SecretRef, ...]:
    refs = []
    for item_path, source, value in found:
        try:
            refs.append(SecretRef(source=source, key=decode(value, item_path)))
        except ConfigError as exc:
            load.report(exc)
    if len(refs) < len(found):
        raise Unusable(path)
    return tuple(refs)


_SECRET_SHAPE: Final = "a secret is a string, {env: NAME} or {file: PATH}"


def _secret_value(item: object, path: str, load: Load) -> tuple[str, str]:
    """(its source, the secret) for one item of ``secrets``, interpolated. Messages name a
    variable or a file, never a value, nor an unknown key (it might be the secret, written as a
    key)."""
    if isinstance(item, str):
        source, value = "inline", _interpolated_text(item, path, load)
        if not value and references(item):
            raise ConfigError(path, f"secret from {item} is empty: {_why_empty(item, load)}")
    elif not isinstance(item, dict):
        raise ConfigError(path, "must be a string, {env: NAME} or {file: PATH}")
    elif unknown := [key for key in item if key not in ("env", "file")]:
        suggestion = did_you_mean(str(unknown[0]), ("env", "file"))
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        raise ConfigError(path, f"has a key other than env or file (not shown: it may be the "
                          f"secret){hint}; {_SECRET_SHAPE}")
    elif len(item) != 1:
        raise ConfigError(path, "give exactly one of env or file")
    elif "env" in item:
        where = f"{path}.env"
        source, value = _secret_from_env(_interpolated_text(item["env"], where, load), where,
                                         load)
    else:
        where = f"{path}.file"
        source, value = _secret_from_file(_interpolated_text(item["file"], where, load), where,
                                          load)
    if not value:
        raise ConfigError(path, f"secret from {source} is empty")
    return source, value


def _interpolated_text(value: object, path: str, load: Load) -> Any:
    """``value`` interpolated when it is a string; as it is otherwise (its check says why)."""
    return interpolate(value, load.env, path) if isinstance(value, str) else value


def _why_empty(text: str, load: Load) -> str:
    """Why ``text``, made of ``${VAR}`` references only, interpolated to nothing: each
    variable's state (text that became empty has no literal part and no non-empty default)."""
    why = []
    for name, default in references(text):
        if name not in load.env:
            why.append(f"{name} is not set, and its default is empty")
        elif not load.env[name] and default is not None:
            why.append(f"{name} is empty, and so is its default")
        else:
            why.append(f"{name} is set but empty")
    return "; ".join(why)


def _secret_from_env(name: object, path: str, load: Load) -> tuple[str, str]:
    if not isinstance(name, str):
        raise ConfigError(path, "must be the name of an environment variable")
    if name not in load.env:
        raise ConfigError(path, f"environment variable {name} is not set")
    return f"env:{name}", load.env[name]


def _secret_from_file(file: object, path: str, load: Load) -> tuple[str, str]:
    if not isinstance(file, str):
        raise ConfigError(path, "must be a path")
    file_path = Path(file) if Path(file).is_absolute() else load.base / file
    return f"file:{file_path}", read_secret_file(file_path, path)


def one_signing_secret(raw: object, path: str, load: Load) -> SecretRef:
    """One whsec_ secret (a string, {env: NAME} or {file: PATH}) that signs what the proxy
    sends: a notification target's."""
    source, value = _secret_value(raw, path, load)
    return SecretRef(source=source, key=decode_forward_secret(value, path))
