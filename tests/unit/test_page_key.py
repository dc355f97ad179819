"""The listing's cursor: any key survives encode/decode exactly, its text is URL-safe, and
anything else is refused with ValueError (the admin API answers 400)."""

from __future__ import annotations

import base64
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.core.listing import PageKey

any_text = st.text(st.characters(exclude_categories=()))  # lone surrogates too
keys = st.builds(PageKey, st.integers(min_value=-(2**63), max_value=2**63 - 1),
                 any_text, any_text)


@given(keys)
def test_a_key_round_trips_exactly_as_url_safe_text(key: PageKey) -> None:
    text = key.encode()
    assert set(text) <= set(string.ascii_letters + string.digits + "-_")
    assert PageKey.decode(text) == key


@given(st.text())
def test_any_other_text_decodes_to_a_key_or_raises_value_error(text: str) -> None:
    try:
        key = PageKey.decode(text)
    except ValueError:
        return
    assert PageKey.decode(key.encode()) == key


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("text", [
    "", "not base64!", "%%%", _b64(b"\xff\xfe"), _b64(b"{}"), _b64(b"[1, 2, 3]"),
    _b64(b'[1, "p"]'), _b64(b'[1.5, "p", "e"]'), _b64(b'[true, "p", "e"]'),
    _b64(b'["1", "p", "e"]'), _b64(b'[1, "p", "e", 4]'), _b64(b'[1e400, "p", "e"]'),
    _b64(b'[99999999999999999999, "p", "e"]'),
])
def test_garbage_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        PageKey.decode(text)
