"""The config part of the Helm chart's values schema (``helm/webhook-sidecar/values.schema.json``,
JSON Schema draft-07), generated from the same declarations as the config schema:

- ``properties.config``: the keys a user may add to the rendered config file — every key but
  those the chart's template (``webhook-sidecar.configYaml`` in ``templates/_helpers.tpl``) sets
  itself, ``CHART_OWNED``;
- ``properties.providers``: the provider blocks, which the template copies into the file as they
  are but for ``secrets``, where an entry may also name a key of an existing Kubernetes Secret
  (``SECRET_KEY_REF``);
- ``definitions``: the value types and blocks those two refer to.

The rest of the file is the chart's own and written by hand: ``--write`` replaces these three
parts and keeps everything else as it is.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Final

from sidecar.config.blocks import PROVIDER, TOP
from sidecar.config.declarations import Block, Nested
from sidecar.config.kinds import JSON, Custom, ref
from sidecar.config.schema.document import block_schema, build_schema, key_schema

CHART_SCHEMA_FILE: Final = "helm/webhook-sidecar/values.schema.json"

# Set by the chart's template from its own values (ports, shutdownTimeoutSeconds, the upstream
# of the mode, store, adminToken, providers): a user's ``config`` may not set them.
CHART_OWNED: Final = ("listen", "admin_listen", "shutdown_timeout", "upstream.url",
                      "upstream.signing_secrets", "store.url", "admin_token", "providers")

_K8S_NAME: Final[JSON] = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                          "maxLength": 253}

# A secret the chart mounts from an existing Secret, as a file (default) or an env variable.
SECRET_KEY_REF: Final[JSON] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["secretKeyRef"],
    "properties": {
        "secretKeyRef": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "key"],
            "properties": {"name": _K8S_NAME,
                           "key": {"type": "string", "pattern": "^[-._a-zA-Z0-9]+$"}},
        },
        "as": {"enum": ["file", "env"]},
    },
}

_GENERATED: Final = (
    "properties.config, properties.providers and definitions are generated from the config "
    "declarations (sidecar/config/model/; sidecar/config/schema/chart.py) by `python -m "
    "sidecar.config.schema --write`; the rest is the chart's own, edited by hand.")

# Annotations: beside a $ref, draft-07 ignores every other keyword.
_ANNOTATIONS: Final = frozenset({"$ref", "description", "default", "title", "$comment"})


def _user_keys(block: Block, path: str = "") -> Block:
    """``block`` without the keys the chart owns; a key the chart fills in part (``upstream``,
    for its url) is not required of the user."""
    keys = {}
    for name, key in block.keys.items():
        where = f"{path}.{name}" if path else name
        if where in CHART_OWNED:
            continue
        if isinstance(key.kind, Nested):
            key = replace(key, kind=Nested(_user_keys(key.kind.block, where)))
        in_part = any(owned.startswith(f"{where}.") for owned in CHART_OWNED)
        keys[name] = replace(key, required=key.required and not in_part)
    return replace(block, keys=keys)


def _config() -> JSON:
    owned = ", ".join(CHART_OWNED[:-1]) + " and " + CHART_OWNED[-1]
    # Without the top level's rules between keys: they are about upstream.url and the
    # providers, which the chart owns.
    return {**block_schema(replace(_user_keys(TOP), extra={})), "description": (
        f"More config file keys merged into the rendered file (the chart owns {owned}). The "
        "rendered file is checked by the proxy at start-up and by the migrate hook.")}


def _providers() -> JSON:
    secrets = PROVIDER.keys["secrets"]
    chart_secrets = Custom("list", {"type": "array", "minItems": 1, "items": {
        "description": "A secret: what the config file accepts, or a key of an existing Secret.",
        "anyOf": [ref("secret"), SECRET_KEY_REF],
    }})
    provider = replace(PROVIDER, keys={**PROVIDER.keys, "secrets": replace(secrets,
                                                                            kind=chart_secrets)})
    return {**key_schema(TOP.keys["providers"]), "additionalProperties": block_schema(provider)}


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(item) for item in node))
    return set()


def _draft7(node: Any) -> Any:
    """The 2020-12 schema ``node`` in draft-07: ``definitions`` for ``$defs``, and a ``$ref`` with
    constraints beside it moved into an ``allOf``."""
    if isinstance(node, list):
        return [_draft7(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _draft7(value) for key, value in node.items()}
    if isinstance(out.get("$ref"), str):
        out["$ref"] = out["$ref"].replace("#/$defs/", "#/definitions/")
        if set(out) - _ANNOTATIONS:
            out["allOf"] = [{"$ref": out.pop("$ref")}, *out.get("allOf", [])]
    return out


def chart_schema(current: JSON) -> JSON:
    """The chart's values schema ``current`` with its generated parts regenerated."""
    config, providers = _config(), _providers()
    defs, wanted = build_schema()["$defs"], _refs([config, providers])
    seen: set[str] = set()
    while wanted - seen:
        name = (wanted - seen).pop()
        seen.add(name)
        wanted |= _refs(defs[name.removeprefix("#/$defs/")])
    out: JSON = {"$schema": current["$schema"], "$comment": _GENERATED}
    out.update((key, value) for key, value in current.items() if key not in out)
    out["properties"] = {**current["properties"], "config": config, "providers": providers}
    out["definitions"] = {name: defs[name] for name in sorted(
        ref.removeprefix("#/$defs/") for ref in seen)}
    return dict(_draft7(out))


def chart_schema_text(current: str) -> str:
    return json.dumps(chart_schema(json.loads(current)), indent=2, ensure_ascii=False) + "\n"
