"""What a signature covers and what signing produces: one value each, passed whole to every
verifier and signer, declarative schemes and plugins alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a verifier may look at: the raw body, the headers, the method and the raw query
    string of the request (the part after ``?``, as received)."""

    body: bytes
    headers: Mapping[str, str]
    method: str = "POST"
    query: str = ""


@dataclass(frozen=True, slots=True)
class SignedDelivery:
    """What a signer produced: the body to send (changed only by schemes that sign inside the
    body) and the headers to add."""

    body: bytes
    headers: dict[str, str]
