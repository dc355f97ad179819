"""Produce the headers a provider would send, so that ``verify`` accepts the delivery.

Used by the demo and the ``send`` command. Tests check it against the providers' own SDK
verifiers, never only against ``verify``.
"""

from __future__ import annotations

import dataclasses
import json

from sidecar.core.errors import VerificationError
from sidecar.core.signing.delivery import Delivery
from sidecar.core.signing.keys import signing_algorithm
from sidecar.core.signing.spec import DeclarativeSpec
from sidecar.core.signing.template import signed_message
from sidecar.core.signing.timestamps import timestamp_text


def sign_declarative(spec: DeclarativeSpec, key: bytes, delivery: Delivery,
                     now: float) -> dict[str, str]:
    """Return the signature header (and the timestamp header, if the scheme has one).

    ``key`` is the shared secret, or for a public-key algorithm the private key (see
    ``asymmetric.py``: Ed25519 32-byte seed, ECDSA DER PKCS#8). ``{header:X}`` placeholders
    are read from the delivery's headers; a missing one is the caller's mistake and raises
    ``ValueError``.
    """
    added: dict[str, str] = {}
    timestamp: str | None = None
    if spec.timestamp is not None and spec.timestamp.json is None:  # see ``stamp_body``
        timestamp = timestamp_text(spec.timestamp.unit, now)
        if spec.timestamp.header is not None:
            added[spec.timestamp.header] = timestamp
    sent = dataclasses.replace(delivery, headers={**delivery.headers, **added})
    try:
        message = signed_message(spec.message, sent, timestamp, spec.signing_url(sent.query))
    except VerificationError as exc:
        raise ValueError(f"cannot sign: {exc.detail or exc.reason}") from None
    algorithm = signing_algorithm(spec, key)
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
    text = timestamp_text(rule.unit, now)
    node[last] = text if rule.unit == "rfc3339" else int(text)
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
