"""Verify a delivery against a ``DeclarativeSpec``: a pure function of the delivery (body,
headers, method, query), the keys and ``now``.

Every failure is a ``VerificationError`` whose ``reason`` is a stable token for logs and
metrics; its detail never contains a secret, a signature or the body.
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.core.errors import VerificationError
from sidecar.core.headers import first_header
from sidecar.core.signing.algorithms import Algorithm
from sidecar.core.signing.delivery import Delivery
from sidecar.core.signing.keys import verifies_with
from sidecar.core.signing.spec import DeclarativeSpec
from sidecar.core.signing.template import signed_message
from sidecar.core.signing.timestamps import body_timestamp, check_timestamp


def verify_declarative(
    spec: DeclarativeSpec, keys: Sequence[bytes], delivery: Delivery, now: float
) -> None:
    """Return if any (key, signature) pair matches; else raise ``VerificationError``."""
    headers = delivery.headers
    raw = first_header(headers, spec.headers)
    if raw is None or not raw.strip():
        raise VerificationError("missing_signature", f"no {' or '.join(spec.headers)} header")
    parts = spec.format.parse(raw.strip(" \t"))
    if not parts.signatures:
        raise VerificationError("malformed_signature", "no signature in an accepted form")

    timestamp: str | None = None
    if spec.timestamp is not None and spec.timestamp.json is None:
        if spec.timestamp.header is None:
            timestamp = parts.timestamp
        else:
            timestamp = first_header(headers, spec.timestamp.headers)
        check_timestamp(spec.timestamp, timestamp, now)

    message = signed_message(spec.message, delivery, timestamp, spec.signing_url(delivery.query))
    # Candidates grouped by the algorithm their version selects (one group when unversioned).
    groups: dict[str, tuple[Algorithm, list[bytes]]] = {}
    labels = parts.labels or ("",) * len(parts.signatures)
    for label, text in zip(labels, parts.signatures, strict=True):
        algorithm = spec.algorithm_for(label)
        try:
            candidate = spec.encoding.decode(text)
        except ValueError:
            continue  # undecodable: this candidate simply cannot match
        groups.setdefault(algorithm.name, (algorithm, []))[1].append(candidate)
    # Every key is tried (rotation); the result does not depend on which one matched.
    matched = False
    for algorithm, candidates in groups.values():
        for key in keys:
            if verifies_with(spec, algorithm, key):
                matched |= algorithm.verify(key, message, candidates)
    if not matched:
        raise VerificationError("bad_signature")
    rule = spec.timestamp
    if rule is not None and rule.json is not None:
        # Read only now that the body is authentic (nothing is decoded before verifying).
        check_timestamp(rule, body_timestamp(rule, rule.json, delivery.body), now)
