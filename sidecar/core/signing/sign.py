"""Produce the headers a provider would send, so that ``verify`` accepts the delivery.

Used by the demo and the ``send`` command. Tests check it against the providers' own SDK
verifiers, never only against ``verify``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime

from sidecar.core.errors import VerificationError
from sidecar.core.signing.asymmetric import PrivateKey
from sidecar.core.signing.spec import Algorithm, DeclarativeSpec
from sidecar.core.signing.verify import signed_message, signing_url


def _timestamp_text(unit: str, now: float) -> str:
    if unit == "ms":
        return str(math.floor(now * 1000))
    if unit == "rfc3339":
        moment = datetime.fromtimestamp(math.floor(now * 1_000_000) / 1_000_000, tz=UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return str(math.floor(now))


def _algorithm_for_key(spec: DeclarativeSpec, key: bytes) -> Algorithm:
    """A ``PrivateKey`` (or any key, in a purely public-key scheme) signs with the public-key
    algorithm; any other key with the scheme's shared-secret algorithm."""
    asymmetric = spec.asymmetric_algorithm
    if asymmetric is not None and (isinstance(key, PrivateKey) or not spec.has_symmetric):
        return asymmetric
    return next(a for a in spec.algorithms if not a.asymmetric)


def sign_declarative(
    spec: DeclarativeSpec,
    key: bytes,
    body: bytes,
    headers: Mapping[str, str],
    now: float,
    *,
    method: str = "POST",
    query: str = "",
) -> dict[str, str]:
    """Return the signature header (and the timestamp header, if the scheme has one).

    ``key`` is the shared secret, or for a public-key algorithm the private key (see
    ``asymmetric.py``: Ed25519 32-byte seed, ECDSA DER PKCS#8). ``{header:X}`` placeholders
    are read from ``headers``; a missing one is the caller's mistake and raises ``ValueError``.
    """
    added: dict[str, str] = {}
    timestamp: str | None = None
    if spec.timestamp is not None and spec.timestamp.json is None:  # see ``stamp_body``
        timestamp = _timestamp_text(spec.timestamp.unit, now)
        if spec.timestamp.header is not None:
            added[spec.timestamp.header] = timestamp
    try:
        message = signed_message(spec.message, body, timestamp, {**headers, **added},
                                 method=method, url=signing_url(spec, query))
    except VerificationError as exc:
        raise ValueError(f"cannot sign: {exc.detail or exc.reason}") from None
    algorithm = _algorithm_for_key(spec, key)
    signature = spec.encoding.encode(algorithm.sign(key, message))
    added[spec.header] = spec.format.render(signature, timestamp, spec.label_for(algorithm))
    return added


def stamp_body(spec: DeclarativeSpec, body: bytes, now: float) -> bytes:
    """For a scheme whose timestamp is in the signed body (``timestamp: {json: …}``), the body
    with ``now`` written at that path, so that a delivery made by ``send`` is fresh; any other
    body (or scheme) unchanged. Only a path of names into existing objects is written; the
    body is then re-serialised compactly."""
    rule = spec.timestamp
    if rule is None or rule.json is None:
        return body
    try:
        document = json.loads(body)
    except ValueError:
        return body
    *parents, last = rule.json.steps
    node = document
    for step in parents:
        if not isinstance(step, str) or not isinstance(node, dict):
            return body
        node = node.get(step)
    if not isinstance(last, str) or not isinstance(node, dict):
        return body
    text = _timestamp_text(rule.unit, now)
    node[last] = text if rule.unit == "rfc3339" else int(text)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
