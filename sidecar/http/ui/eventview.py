"""What an event page shows of the stored request and the recorded response: secrets masked,
a JSON body pretty-printed, any other body only by its size and content type (a form or a
text body may hold credentials under names the masking cannot see)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.http.ui.masking import Masker


def request_view(masker: Masker, stored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if stored is None:
        return None
    headers = masker.headers(stored["headers"])
    return {"method": stored["method"], "path": masker.path(stored["path"]),
            "headers": headers,
            **_body(masker, headers, stored["body_text"], stored["body_base64"])}


def response_view(masker: Masker, event: Mapping[str, Any]) -> dict[str, Any] | None:
    if event.get("response_status") is None:
        return None
    headers = masker.headers(event.get("response_headers") or [])
    return {"status": event["response_status"], "headers": headers,
            **_body(masker, headers, event.get("response_body_text"),
                    event.get("response_body_base64"))}


def _body(masker: Masker, headers: list[tuple[str, str]], text: str | None,
          b64: str | None) -> dict[str, Any]:
    """``json``: the body pretty-printed and masked, or None; ``size`` in bytes and the
    ``content_type`` for any other body. ``text`` is None when the body is not UTF-8."""
    content_type = next((value for name, value in headers if name.lower() == "content-type"),
                        None)
    size = (len(text.encode("utf-8")) if text is not None else len(b64 or "") * 3 // 4
            - (b64 or "").count("=", -2))
    return {"json": masker.json_text(text) if text else None, "size": size,
            "content_type": content_type}
