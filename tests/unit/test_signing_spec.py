"""Strict parsing of the signature schema, durations and secrets: errors name the key path."""

from __future__ import annotations

import base64
import copy
import subprocess
import sys

import pytest

from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError
from sidecar.core.signing import (
    KvListFormat,
    PlainFormat,
    VersionedListFormat,
    decode_secret,
    parse_signature_spec,
)

ROOT = "providers.acme.signature"
BASE: dict[str, object] = {
    "algorithm": "hmac-sha256",
    "header": "X-Acme-Signature",
    "format": {"type": "kv_list", "signature_keys": ["v1"], "timestamp_key": "t"},
    "encoding": "hex",
    "message": "{timestamp}.{body}",
    "secret": {"encoding": "utf8"},
    "timestamp": {"from": "signature", "unit": "s", "tolerance": "5m", "direction": "both"},
}


def changed(**changes: object) -> dict[str, object]:
    """BASE with dotted keys set (value ``...`` deletes the key)."""
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node: dict[str, object] = data
        for key in parents:
            child = node[key]
            assert isinstance(child, dict)
            node = child
        if value is ...:
            del node[last]
        else:
            node[last] = value
    return data


def error_path(data: object) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec(data, ROOT)
    return caught.value.path


def test_base_parses_with_its_values() -> None:
    spec = parse_signature_spec(BASE, ROOT)
    assert spec.algorithm.name == "hmac-sha256"
    assert spec.format == KvListFormat(("v1",), ",", "=", "t")
    assert spec.encoding.name == "hex"
    assert spec.timestamp is not None
    assert (spec.timestamp.header, spec.timestamp.tolerance, spec.timestamp.unit,
            spec.timestamp.direction) == (None, 300.0, "s", "both")


def test_defaults() -> None:
    spec = parse_signature_spec(
        changed(secret=..., timestamp={"from": "signature"}, format={"type": "kv_list",
                "signature_keys": ["v1"], "timestamp_key": "t"}), ROOT
    )
    assert spec.secret.encoding == "utf8" and spec.secret.strip_prefix == ""
    assert spec.timestamp is not None
    assert (spec.timestamp.unit, spec.timestamp.tolerance, spec.timestamp.direction) == (
        "s", 300.0, "both"
    )
    assert parse_signature_spec(
        changed(format={"type": "versioned_list", "versions": ["v1"]}, message="{body}",
                timestamp=...), ROOT
    ).format == VersionedListFormat(("v1",), " ", ",")
    assert parse_signature_spec(
        changed(format={"type": "plain"}, message="{body}", timestamp=...), ROOT
    ).format == PlainFormat("")


@pytest.mark.parametrize(
    "data, path",
    [
        # unknown keys
        (changed(algo="x"), f"{ROOT}.algo"),
        (changed(format__prefix="sha256="), f"{ROOT}.format.prefix"),  # not for kv_list
        (changed(format__versions=["v1"]), f"{ROOT}.format.versions"),
        (changed(secret__decode="base64"), f"{ROOT}.secret.decode"),
        (changed(timestamp__window="5m"), f"{ROOT}.timestamp.window"),
        # missing required keys
        (changed(algorithm=...), f"{ROOT}.algorithm"),
        (changed(header=...), f"{ROOT}.header"),
        (changed(format=...), f"{ROOT}.format"),
        (changed(format__type=...), f"{ROOT}.format.type"),
        (changed(format__signature_keys=...), f"{ROOT}.format.signature_keys"),
        (changed(encoding=...), f"{ROOT}.encoding"),
        (changed(message=...), f"{ROOT}.message"),
        (changed(timestamp={"unit": "s"}), f"{ROOT}.timestamp.header"),
        # wrong types
        ("not a mapping", ROOT),
        (changed(format="kv_list"), f"{ROOT}.format"),
        (changed(header=7), f"{ROOT}.header"),
        (changed(message=["{body}"]), f"{ROOT}.message"),
        (changed(format__signature_keys="v1"), f"{ROOT}.format.signature_keys"),
        (changed(format__signature_keys=[]), f"{ROOT}.format.signature_keys"),
        (changed(format__signature_keys=["v1", 2]), f"{ROOT}.format.signature_keys[1]"),
        (changed(format__pair_separator=""), f"{ROOT}.format.pair_separator"),
        (changed(secret="utf8"), f"{ROOT}.secret"),
        (changed(timestamp="5m"), f"{ROOT}.timestamp"),
        (changed(timestamp__tolerance=True), f"{ROOT}.timestamp.tolerance"),
        ({1: "x"}, ROOT),
        # bad enum values
        (changed(algorithm="hmac-md5"), f"{ROOT}.algorithm"),
        (changed(format__type="kv"), f"{ROOT}.format.type"),
        (changed(encoding="base32"), f"{ROOT}.encoding"),
        (changed(secret__encoding="latin1"), f"{ROOT}.secret.encoding"),
        (changed(timestamp__unit="us"), f"{ROOT}.timestamp.unit"),
        (changed(timestamp__direction="future"), f"{ROOT}.timestamp.direction"),
        (changed(timestamp__from="header"), f"{ROOT}.timestamp.from"),
        # bad values
        (changed(header="X Acme"), f"{ROOT}.header"),
        (changed(header=""), f"{ROOT}.header"),
        (changed(timestamp__tolerance="0s"), f"{ROOT}.timestamp.tolerance"),
        (changed(timestamp__tolerance="soon"), f"{ROOT}.timestamp.tolerance"),
        (changed(format__kv_separator=","), f"{ROOT}.format.kv_separator"),
        (changed(format__timestamp_key="v1"), f"{ROOT}.format.timestamp_key"),
        (changed(timestamp__header="X-Ts"), f"{ROOT}.timestamp.from"),
        (changed(message="{timestamp}.{payload}"), f"{ROOT}.message"),
        (changed(message="{timestamp}"), f"{ROOT}.message"),  # body not signed
        (changed(message="{timestamp}.{body"), f"{ROOT}.message"),
        (changed(message="{timestamp}.{header:Bad Name}.{body}"), f"{ROOT}.message"),
        (changed(message="x\ud800{timestamp}{body}"), f"{ROOT}.message"),
        # cross-field rules
        (changed(timestamp=...), f"{ROOT}.message"),  # {timestamp} with no timestamp block
        (changed(message="{body}"), f"{ROOT}.timestamp"),  # a timestamp that is not signed
        (changed(timestamp={"header": "X-Ts"}), f"{ROOT}.format.timestamp_key"),
        (changed(format={"type": "plain"}), f"{ROOT}.timestamp.from"),
    ],
)
def test_errors_name_the_key_path(data: object, path: str) -> None:
    assert error_path(data) == path


def test_bad_enum_message_lists_the_choices() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec(changed(format__type="kv"), ROOT)
    assert str(caught.value) == (
        f"{ROOT}.format.type: must be one of plain, kv_list, versioned_list"
    )


def test_key_for_another_format_type_is_explained() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_signature_spec(changed(format__prefix="v0="), ROOT)
    assert "for type kv_list" in caught.value.message


def test_template_placeholders_and_escaped_braces() -> None:
    spec = parse_signature_spec(
        changed(message="{{v}}:{header:Id}:{timestamp}:{body}"), ROOT
    )
    kinds = [(part.kind, part.data, part.name) for part in spec.message.parts]
    assert kinds == [
        ("text", b"{v}:", ""), ("header", b"", "Id"), ("text", b":", ""),
        ("timestamp", b"", ""), ("text", b":", ""), ("body", b"", ""),
    ]
    assert spec.message.uses_timestamp


def test_timestamp_null_means_no_timestamp() -> None:
    data = changed(timestamp=None, message="{body}", format={"type": "plain"})
    assert parse_signature_spec(data, ROOT).timestamp is None


# --- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("500ms", 0.5), ("10s", 10.0), ("5m", 300.0), ("2h", 7200.0), ("3d", 259200.0),
        ("1.5h", 5400.0), (" 30s ", 30.0), ("45", 45.0), (7, 7.0), (0.25, 0.25), (0, 0.0),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value, "x") == seconds


@pytest.mark.parametrize(
    "value",
    ["", "5 minutes", "-1s", "1e3", "5M", "s", "1.s", "٣s", True, None, [5], -1,
     float("nan"), float("inf"), 10**400],
)
def test_bad_durations_name_the_path(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_duration(value, "providers.x.retention")
    assert caught.value.path == "providers.x.retention"


# --- secrets --------------------------------------------------------------------------------


def test_secret_decodings() -> None:
    sw = parse_signature_spec(changed(secret={"encoding": "base64", "strip_prefix": "whsec_"}),
                              ROOT)
    key = decode_secret(sw, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "s")
    assert key == base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") and len(key) == 24
    assert decode_secret(sw, "whsec_AAEC", "s") == b"\x00\x01\x02"
    assert decode_secret(sw, "AAE", "s") == b"\x00\x01"  # no prefix, no padding: tolerated
    hexed = parse_signature_spec(changed(secret={"encoding": "hex"}), ROOT)
    assert decode_secret(hexed, "44782DEF", "s") == b"\x44\x78\x2d\xef"
    plain = parse_signature_spec(BASE, ROOT)
    assert decode_secret(plain, "whsec_abc", "s") == b"whsec_abc"


@pytest.mark.parametrize(
    "secret, raw, message",
    [
        ({"encoding": "base64", "strip_prefix": "whsec_"}, "whsec_not base64!", "valid base64"),
        ({"encoding": "base64", "strip_prefix": "whsec_"}, "whsec_", "empty"),
        ({"encoding": "base64"}, "A", "valid base64"),
        ({"encoding": "hex"}, "abc", "valid hex"),
        ({"encoding": "hex"}, "ab cd", "valid hex"),
        ({"encoding": "utf8"}, "", "empty"),
        ({"encoding": "utf8"}, "bad\udcff", "valid utf8"),
    ],
)
def test_bad_secrets_raise_config_error_without_the_secret(
    secret: dict[str, object], raw: str, message: str
) -> None:
    spec = parse_signature_spec(changed(secret=secret), ROOT)
    with pytest.raises(ConfigError) as caught:
        decode_secret(spec, raw, "providers.acme.secrets[1]")
    assert caught.value.path == "providers.acme.secrets[1]"
    assert message in caught.value.message
    if len(raw) > 6:
        assert raw not in str(caught.value) and raw[6:] not in str(caught.value)
    # The codec's own error may quote the secret: it must not be chained.
    error = caught.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_core_imports_no_io_framework() -> None:
    code = (
        "import sys, sidecar.core.signing, sidecar.core.eventid, sidecar.core.durations\n"
        "bad = {'aiohttp', 'asyncpg', 'yaml'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
