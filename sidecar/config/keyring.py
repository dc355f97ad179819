"""The current key bytes of every provider. Secrets read from files are re-read on ``reload()``
(a Kubernetes Secret volume is updated in place), so rotation needs no restart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sidecar.config.model import ProviderConfig, SecretRef
from sidecar.core.errors import ConfigError
from sidecar.core.signing import decode_secret
from sidecar.core.signing.forward import decode_forward_secret

SIGNING: Final = "upstream.signing_secrets"  # how reloads name the forward-signing keys


def read_secret_file(file: Path, path: str) -> str:
    """A secret file's text without surrounding whitespace (Kubernetes Secret files usually end
    with a newline that is not part of the secret); errors name ``path``."""
    try:
        text = file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(path, f"cannot read {file}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(path, f"{file} is not UTF-8 text") from exc
    if not text:
        raise ConfigError(path, f"{file} is empty")
    return text


@dataclass(frozen=True, slots=True)
class Reload:
    changed: tuple[str, ...]  # provider keys (or signing-secret key paths) whose keys changed
    errors: tuple[str, ...]  # problems that left a provider's keys as they were


class Keyring:
    """Every provider's verification keys, and the keys that sign forwards to the app: the
    top-level upstream's (``signing``), or a provider's own where its upstream names other
    secrets."""

    def __init__(self, providers: Sequence[ProviderConfig],
                 signing: Sequence[SecretRef] = ()) -> None:
        self._providers = {p.key: p for p in providers}
        self._keys = {p.key: p.key_bytes for p in providers}
        # Forward-signing secrets by the key path that names them; each provider's set.
        self._signing = {SIGNING: tuple(signing)}
        self._signing_of: dict[str, str] = {}
        for p in providers:
            own = tuple(p.upstream.signing_secrets)
            name = SIGNING if own == self._signing[SIGNING] else _own_signing(p.key)
            self._signing.setdefault(name, own)
            self._signing_of[p.key] = name
        self._signing_keys = {name: tuple(s.key for s in refs)
                              for name, refs in self._signing.items()}

    def key_bytes(self, provider: str) -> tuple[bytes, ...]:
        return self._keys[provider]

    def signing_keys(self, provider: str | None = None) -> tuple[bytes, ...]:
        """The keys a forward of ``provider`` is signed with (none: not signed); without one,
        the top-level upstream's."""
        return self._signing_keys[self._signing_of.get(provider or "", SIGNING)]

    @property
    def watches_files(self) -> bool:
        return any(s.file for refs in self._signing.values() for s in refs) or any(
            s.file for p in self._providers.values() for s in p.secrets)

    def reload(self) -> Reload:
        """Re-read every file secret. A provider's keys (or the signing keys) change only if
        all of its files read and decode; otherwise the current keys stay and the error is
        reported."""
        changed: list[str] = []
        errors: list[str] = []
        for key, provider in self._providers.items():
            if not any(s.file for s in provider.secrets):
                continue
            try:
                fresh = tuple(self._read(provider, i) for i in range(len(provider.secrets)))
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            if fresh != self._keys[key]:
                self._keys[key] = fresh
                changed.append(key)
        for name, refs in self._signing.items():
            if not any(s.file for s in refs):
                continue
            try:
                signing = tuple(_read_signing(s, f"{name}[{i}]") for i, s in enumerate(refs))
            except ConfigError as exc:
                errors.append(str(exc))
            else:
                if signing != self._signing_keys[name]:
                    self._signing_keys[name] = signing
                    changed.append(name)
        return Reload(tuple(changed), tuple(errors))

    def _read(self, provider: ProviderConfig, index: int) -> bytes:
        secret = provider.secrets[index]
        path = f"providers.{provider.key}.secrets[{index}]"
        if secret.file is None:
            return secret.key
        raw = read_secret_file(Path(secret.file), path)
        return decode_secret(provider.signature, raw, path)


def _own_signing(provider: str) -> str:
    return f"providers.{provider}.upstream.signing_secrets"


def _read_signing(secret: SecretRef, path: str) -> bytes:
    if secret.file is None:
        return secret.key
    return decode_forward_secret(read_secret_file(Path(secret.file), path), path)
