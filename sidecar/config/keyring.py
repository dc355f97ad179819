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
    changed: tuple[str, ...]  # provider keys (or SIGNING) whose keys were replaced
    errors: tuple[str, ...]  # problems that left a provider's keys as they were


class Keyring:
    """Every provider's verification keys, and the keys that sign forwards to the app."""

    def __init__(self, providers: Sequence[ProviderConfig],
                 signing: Sequence[SecretRef] = ()) -> None:
        self._providers = {p.key: p for p in providers}
        self._keys = {p.key: p.key_bytes for p in providers}
        self._signing = tuple(signing)
        self._signing_keys = tuple(s.key for s in self._signing)

    def key_bytes(self, provider: str) -> tuple[bytes, ...]:
        return self._keys[provider]

    def signing_keys(self) -> tuple[bytes, ...]:
        """The keys every forward is signed with (none: forwards are not signed)."""
        return self._signing_keys

    @property
    def watches_files(self) -> bool:
        return any(s.file for s in self._signing) or any(
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
        if any(s.file for s in self._signing):
            try:
                signing = tuple(_read_signing(s, f"{SIGNING}[{i}]")
                                for i, s in enumerate(self._signing))
            except ConfigError as exc:
                errors.append(str(exc))
            else:
                if signing != self._signing_keys:
                    self._signing_keys = signing
                    changed.append(SIGNING)
        return Reload(tuple(changed), tuple(errors))

    def _read(self, provider: ProviderConfig, index: int) -> bytes:
        secret = provider.secrets[index]
        path = f"providers.{provider.key}.secrets[{index}]"
        if secret.file is None:
            return secret.key
        raw = read_secret_file(Path(secret.file), path)
        return decode_secret(provider.signature, raw, path)


def _read_signing(secret: SecretRef, path: str) -> bytes:
    if secret.file is None:
        return secret.key
    return decode_forward_secret(read_secret_file(Path(secret.file), path), path)
