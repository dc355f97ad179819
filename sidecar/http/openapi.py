"""The admin API's OpenAPI 3.1 description: ``openapi.json`` beside this module, shipped in the
wheel and served at ``/admin/openapi.json``; ``docs/openapi.json`` is the same file (a test keeps
them equal, and checks it describes exactly the routes the admin listener registers)."""

from __future__ import annotations

from importlib.resources import files


def description() -> bytes:
    """The description as shipped, byte for byte."""
    return files("sidecar.http").joinpath("openapi.json").read_bytes()
