"""Keys: a configured secret or signing key decoded into the key bytes of its scheme, and which
key each algorithm may use. A public key is typed (``PublicKey``) so that it can never key an
HMAC: anyone could then sign.

Every failure is a ``ConfigError`` naming the key path and never quoting the secret.
"""

from __future__ import annotations

from sidecar.core.errors import ConfigError
from sidecar.core.signing.algorithms import Algorithm
from sidecar.core.signing.asymmetric import PrivateKey, PublicKey
from sidecar.core.signing.encodings import SECRET_DECODERS
from sidecar.core.signing.spec import DeclarativeSpec, SecretSpec


def _decode(encoding: str, text: str) -> bytes:
    return SECRET_DECODERS[encoding](text)


def decode_symmetric_secret(secret: SecretSpec, raw: str, path: str) -> bytes:
    """A shared secret's key bytes; ``ConfigError`` (never quoting the secret) if unusable."""
    prefix = secret.strip_prefix
    text = raw[len(prefix) :] if prefix and raw.startswith(prefix) else raw
    if secret.private_key_prefix and raw.startswith(secret.private_key_prefix):
        raise ConfigError(path, f"a {secret.private_key_prefix!r} private key is not a "
                          "verification secret; configure the public key")
    try:
        key = _decode(secret.encoding, text)
    except ValueError:
        after = f" after the {prefix!r} prefix" if prefix else ""
        # from None: the underlying error message may quote characters of the secret.
        raise ConfigError(path, f"secret is not valid {secret.encoding}{after}") from None
    if not key:
        raise ConfigError(path, "secret is empty")
    return key


def _decode_asymmetric(spec: DeclarativeSpec, text: str, path: str, what: str) -> bytes:
    try:
        key = _decode(spec.secret.encoding, text)
    except ValueError:
        raise ConfigError(path, f"{what} is not valid {spec.secret.encoding}") from None
    if not key:
        raise ConfigError(path, f"{what} is empty")
    return key


def decode_declarative_secret(spec: DeclarativeSpec, raw: str, path: str) -> bytes:
    """A configured secret: a ``PublicKey`` for the scheme's public-key algorithm (every secret
    of a purely public-key scheme, or one with ``public_key_prefix`` in a mixed scheme), else
    the shared secret's bytes."""
    asymmetric = spec.asymmetric_algorithm
    public_prefix = spec.secret.public_key_prefix
    if asymmetric is not None and (
        not spec.has_symmetric or (public_prefix and raw.startswith(public_prefix))
    ):
        if spec.secret.private_key_prefix and raw.startswith(spec.secret.private_key_prefix):
            raise ConfigError(path, "this is a private key; configure the public key")
        for prefix in (public_prefix, spec.secret.strip_prefix):
            if prefix and raw.startswith(prefix):
                raw = raw[len(prefix) :]
                break
        key = _decode_asymmetric(spec, raw, path, "public key")
        try:
            asymmetric.check_key(key)
        except ValueError as exc:
            raise ConfigError(path, f"not a usable {asymmetric.name} public key: {exc}") from None
        return PublicKey(key)
    shared_prefix = spec.secret.strip_prefix
    private_prefix = spec.secret.private_key_prefix
    if private_prefix and raw.startswith(private_prefix):
        raise ConfigError(path, "this is a private key; configure the public key")
    if asymmetric is not None and public_prefix and shared_prefix \
            and not raw.startswith(shared_prefix):
        # In a scheme that mixes shared secrets and public keys, an unmarked value could be a
        # public key pasted without its prefix: used as an HMAC secret, anyone could sign.
        raise ConfigError(path, f"must start with {shared_prefix!r} (a shared secret) or "
                          f"{public_prefix!r} (a public key)")
    return decode_symmetric_secret(spec.secret, raw, path)


def decode_declarative_signing_key(spec: DeclarativeSpec, raw: str, path: str) -> bytes:
    """A key for ``sign``: a ``PrivateKey`` for the public-key algorithm (every key of a purely
    public-key scheme, or one with ``private_key_prefix``), else the shared secret."""
    asymmetric = spec.asymmetric_algorithm
    private_prefix = spec.secret.private_key_prefix
    if asymmetric is not None and (
        not spec.has_symmetric or (private_prefix and raw.startswith(private_prefix))
    ):
        if private_prefix and raw.startswith(private_prefix):
            raw = raw[len(private_prefix) :]
        key = PrivateKey(_decode_asymmetric(spec, raw, path, "private key"))
        try:
            asymmetric.sign(key, b"probe")
        except ValueError as exc:
            raise ConfigError(path, f"not a usable {asymmetric.name} private key: {exc}") from None
        return key
    return decode_symmetric_secret(spec.secret, raw, path)


def verifies_with(spec: DeclarativeSpec, algorithm: Algorithm, key: bytes) -> bool:
    """Which keys an algorithm may use: a public key never keys an HMAC, and in a scheme that
    also has shared secrets only a typed ``PublicKey`` verifies a public-key signature."""
    if isinstance(key, PrivateKey):
        return False
    if algorithm.asymmetric:
        return isinstance(key, PublicKey) or not spec.has_symmetric
    return not isinstance(key, PublicKey)


def signing_algorithm(spec: DeclarativeSpec, key: bytes) -> Algorithm:
    """A ``PrivateKey`` (or any key, in a purely public-key scheme) signs with the public-key
    algorithm; any other key with the scheme's shared-secret algorithm."""
    asymmetric = spec.asymmetric_algorithm
    if asymmetric is not None and (isinstance(key, PrivateKey) or not spec.has_symmetric):
        return asymmetric
    return next(a for a in spec.algorithms if not a.asymmetric)
