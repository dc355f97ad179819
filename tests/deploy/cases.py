"""Configs for the schema/loader agreement tests: valid, invalid, loader-only and findings.

Each case is a config as the YAML loader produces it, the environment it is loaded with and the
files beside it (secret files, relative to the config's folder)."""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass, field
from typing import Any

SW_SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
ENV = {
    "GITHUB_SECRET": "github-secret",
    "ADMIN_TOKEN": "0123456789abcdef-admin",
    "STORE_URL": "postgresql://sidecar:pw@db:5432/sidecar",
    "NOT_A_DURATION": "soon",
}
FILES = {"acme-secret.txt": "acme-secret\n", "empty-secret.txt": "\n"}


@dataclass(frozen=True)
class Case:
    id: str
    config: Any
    env: dict[str, str] = field(default_factory=lambda: dict(ENV))
    rule: int | None = None  # loader-only cases: the index in LOADER_ONLY_RULES


# SendGrid's published test public key (a batch provider that decodes it).
SENDGRID_TEST_KEY = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1"
                     "flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==")


def base(**top: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "upstream": {"url": "http://127.0.0.1:3000"},
        "providers": {"stripe": {"path": "/webhooks/stripe", "preset": "stripe",
                                 "secrets": ["whsec_test"]}},
    }
    config.update(copy.deepcopy(top))
    return config


def provider(block: dict[str, Any], key: str = "acme", **top: Any) -> dict[str, Any]:
    """A config whose only provider is ``block`` (path and secrets added when absent)."""
    block = {"path": f"/webhooks/{key}", "secrets": [{"file": "acme-secret.txt"}],
             **copy.deepcopy(block)}
    return base(providers={key: block}, **top)


HMAC_PLAIN = {
    "algorithm": "hmac-sha256",
    "header": "X-Acme-Signature",
    "format": {"type": "plain", "prefix": "sha256="},
    "encoding": "hex",
    "message": "{timestamp}.{body}",
    "secret": {"encoding": "utf8"},
    "timestamp": {"header": "X-Acme-Timestamp", "unit": "s", "tolerance": "5m",
                  "direction": "both"},
}
KV_LIST = {
    "algorithm": "hmac-sha256",
    "header": "Stripe-Signature",
    "format": {"type": "kv_list", "pair_separator": ",", "kv_separator": "=",
               "signature_keys": ["v1"], "timestamp_key": "t"},
    "encoding": "hex",
    "message": "{timestamp}.{body}",
    "timestamp": {"from": "signature", "unit": "s", "tolerance": 300, "direction": "past"},
}
VERSIONED = {
    "algorithm": "hmac-sha256",
    "header": "webhook-signature",
    "format": {"type": "versioned_list", "list_separator": " ", "version_separator": ",",
               "versions": ["v1", "v1a"], "algorithms": {"v1a": "ed25519"}},
    "encoding": "base64",
    "message": "{header:webhook-id}.{timestamp}.{body}",
    "secret": {"encoding": "base64", "strip_prefix": "whsec_", "public_key_prefix": "whpk_",
               "private_key_prefix": "whsk_"},
    "timestamp": {"header": "webhook-timestamp", "unit": "s", "tolerance": "5m"},
}
TOKEN = {"algorithm": "token", "header": "X-Gitlab-Token", "format": {"type": "plain"},
         "encoding": "utf8", "secret": None, "message": None}
URL_SIGNED = {
    "algorithm": "hmac-sha256", "header": "X-Signature", "format": {"type": "plain"},
    "encoding": "base64", "message": "{method}{url}{body}{{literal}}",
    "url": "https://hooks.example.com:8443/webhooks/acme", "append_query": True,
}
HEADER_ID = {"header": "X-Acme-Event-Id", "max_length": 128}


def acme(signature: Any = None, event_id: Any = None, **rest: Any) -> dict[str, Any]:
    return provider({"signature": signature or HMAC_PLAIN, "event_id": event_id or HEADER_ID,
                     **rest})


KITCHEN_SINK = base(
    listen="0.0.0.0:8080", admin_listen="[::1]:09090", admin_token="${ADMIN_TOKEN}",
    max_body_bytes="2MiB", shutdown_timeout="25s", body_read_timeout="5s",
    upstream={"url": "https://app.internal:3000/base/", "timeout": "10s",
              "connect_timeout": 2, "max_connections": 50, "keepalive_timeout": "4.5s",
              "max_response_bytes": 65536},
    store={"url": "${STORE_URL}", "pool_min_size": 0, "pool_max_size": 20,
           "acquire_timeout": "1500ms", "statement_timeout": "5s", "lock_timeout": "2s",
           "statement_cache_size": 0, "session_settings": False},
    log={"level": "${LOG_LEVEL:-warning}", "format": "json"},
    maintenance={"interval": "30s", "retention_batch_size": 1000,
                 "secrets_reload_interval": "5s"},
    providers={
        "stripe": {"path": "/webhooks/stripe", "preset": "stripe", "description": "Stripe",
                   "secrets": ["whsec_a", {"env": "GITHUB_SECRET"}, {"file": "acme-secret.txt"}],
                   "lease": 30, "inflight_wait": 2.5, "retention": "30d", "retry_window": "3d",
                   "max_body_bytes": 1048576, "final_statuses": [400, 422],
                   "on_payload_mismatch": "reject", "store_payload": True,
                   "replay_nonce": {"json": "$.signature.token"},
                   "signature": {"timestamp": {"tolerance": "10m"},
                                 "format": {"signature_keys": ["v1", "v2"]}},
                   "event_id": {"max_length": 100}},
        "acme_v2": {"path": "/webhooks/acme-v2", "preset": None,
                    "secrets": {"file": "acme-secret.txt"},
                    "signature": HMAC_PLAIN, "event_id": HEADER_ID, "handshake": None,
                    "retry_window": None},
    },
)

VALID: list[Case] = [
    Case("minimal-preset", base()),
    Case("filter-types-and-conditions", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "store_outage": "forward",
        "filter": {"types": {"allow": ["invoice.*"], "drop": ["invoice.upcoming"]},
                   "when": [{"path": "$.livemode", "equals": True},
                            {"path": "$.data.object.currency", "in": ["eur", None, 1.5]},
                            {"path": "$['data'].x", "exists": False}]}}})),
    Case("filter-own-event-type", provider({
        "signature": {"algorithm": "hmac-sha256", "header": "X-Sig",
                      "format": {"type": "plain"}, "encoding": "hex", "message": "{body}",
                      "secret": {"encoding": "utf8"}},
        "event_id": {"header": "X-Id"}, "event_type": {"header": ["X-Type", "X-Kind"]},
        "filter": {"types": {"drop": ["ping"]}}})),
    Case("kitchen-sink", KITCHEN_SINK),
    Case("nullable-blocks", base(store=None, log=None, maintenance=None, admin_token=None)),
    Case("sqlite-absolute-and-ports", base(listen="127.0.0.1:0", admin_listen="localhost:65535",
                                           store={"url": "sqlite:////var/lib/x/events.db"})),
    Case("postgres-scheme-variants", base(store={"url": "postgres://u@h/db"})),
    Case("interpolated-values", base(
        listen="${LISTEN:-0.0.0.0:8080}", shutdown_timeout="${SHUTDOWN:-20s}",
        upstream={"url": "${APP_URL:-http://127.0.0.1:3000}", "timeout": "${T:-5s}"},
        providers={"stripe": {"path": "${STRIPE_PATH:-/webhooks/stripe}",
                              "preset": "${PRESET:-stripe}",
                              "secrets": ["${GITHUB_SECRET}"],
                              "final_statuses": ["${FINAL:-4xx}", 301]}})),
    Case("declarative-plain-header-timestamp", acme()),
    Case("declarative-kv-list", acme(KV_LIST, {"json": "$.id"})),
    Case("declarative-versioned-list", provider({
        "signature": VERSIONED, "event_id": {"header": "webhook-id"},
        "secrets": [SW_SECRET]})),
    Case("declarative-token", acme(TOKEN, {"header": "Idempotency-Key"})),
    Case("declarative-url-signed", acme(URL_SIGNED, {"json": "$['event-id']"})),
    Case("declarative-defaults-and-nulls", acme(
        {"algorithm": "hmac-sha1", "header": "X-Hub-Signature", "format": {"type": "plain"},
         "encoding": "hex", "message": "{body}", "timestamp": None, "url": None,
         "secret": {"encoding": "hex"}, "append_query": False},
        secrets=["00ff"])),
    Case("event-id-composite", acme(event_id={"composite": [
        {"json": "$.event"}, {"header": "X-Ts"}, {"json": "$.items[0].id", "optional": True},
        {"json": "$[\"a b\"]", "optional": False}]})),
    Case("event-id-batch", acme(event_id={"batch": {"items": "$.events[*]",
                                                    "item_id": {"json": "$.id"}},
                                          "max_length": 64})),
    Case("event-id-batch-composite", acme(event_id={"batch": {"items": "$[*]", "item_id": {
        "composite": [{"json": "$.a"}, {"json": "$.b", "optional": True}],
        "max_length": 10}}})),
    Case("handshake-json", acme(handshake={
        "when": {"json": "$.type", "equals": "url_verification"},
        "respond": {"json": {"challenge": "$.challenge", "token": {"hmac_sha256_hex": "$.t"},
                             "literal": "ok", "n": 1, "flag": True, "nothing": None,
                             "list": [1, 2], "obj": {"a": 1}},
                    "status": 200}})),
    Case("handshake-text-header", acme(handshake={
        "when": {"header": "X-Kind", "equals": "verify"},
        "respond": {"text": "$.challenge", "status": 201}})),
    Case("handshake-equals-anything", acme(handshake={
        "when": {"json": "$.type", "equals": 1}, "respond": {"json": {}}})),
    Case("plugin-twilio", provider({"signature": {"plugin": "twilio",
                                                  "url": "https://example.com/sms",
                                                  "algorithm": "hmac-sha256",
                                                  "secret": {"encoding": "utf8"}},
                                    "event_id": {"header": "I-Twilio-Idempotency-Token"}})),
    Case("plugin-adyen", provider({"signature": {"plugin": "adyen"},
                                   "event_id": {"json": "$.id"},
                                   "secrets": ["00112233445566778899aabbccddeeff"]})),
    Case("plugin-mailgun", provider({"signature": {"plugin": "mailgun", "tolerance": "10m",
                                                   "secret": None},
                                     "event_id": {"json": "$.signature.token"}})),
    Case("preset-twilio-with-url", provider({"preset": "twilio", "signature": {
        "url": "https://example.com/twilio"}}, key="twilio")),
    Case("preset-overrides", base(providers={"slack": {
        "path": "/slack", "preset": "slack", "secrets": ["s"],
        "signature": {"timestamp": {"tolerance": "1m", "direction": "past"}},
        "handshake": {"respond": {"status": 200}},
        "event_id": {"json": "$.event.id"}}})),
    Case("preset-event-id-replaced", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "event_id": {"header": "X-Id"}}})),
    Case("secrets-forms", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": "whsec_single"}})),
    Case("secret-mapping-single", base(providers={"github": {
        "path": "/gh", "preset": "github", "secrets": {"env": "GITHUB_SECRET"}}})),
    Case("statuses-empty-and-mixed", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "final_statuses": []}, "github": {
        "path": "/g", "preset": "github", "secrets": ["x"],
        "final_statuses": [100, "1xx", 599, "3xx"]}})),
    Case("sizes-and-durations", base(max_body_bytes=" 512 KiB ", shutdown_timeout=0,
                                     upstream={"url": "HTTP://app", "timeout": "0.5m",
                                               "max_response_bytes": "1KB"})),
    Case("provider-key-charset", base(providers={"a-b_c9": {
        "path": "/x", "preset": "github", "secrets": ["s"]}})),
    Case("trusted-proxies", base(trusted_proxies=["10.0.0.0/8", "192.168.1.7", "fd00::/8",
                                                  "::1", "${LB_NET:-172.16.0.0/12}"])),
]


INVALID: list[Case] = [
    Case("not-a-mapping", ["listen"]),
    Case("top-null", None),
    Case("unknown-top-key", base(lsten="0.0.0.0:8080")),
    Case("unknown-upstream-key", base(upstream={"url": "http://a", "timout": "1s"})),
    Case("unknown-store-key", base(store={"uri": "sqlite:///x"})),
    Case("unknown-log-key", base(log={"levels": "info"})),
    Case("unknown-maintenance-key", base(maintenance={"every": "1m"})),
    Case("unknown-provider-key", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "leese": "1m"}})),
    Case("missing-upstream", {"providers": base()["providers"]}),
    Case("upstream-null", base(upstream=None)),
    Case("missing-upstream-url", base(upstream={"timeout": "1s"})),
    Case("upstream-url-ftp", base(upstream={"url": "ftp://x"})),
    Case("upstream-url-relative", base(upstream={"url": "/app"})),
    Case("missing-providers", {"upstream": {"url": "http://a"}}),
    Case("providers-empty", base(providers={})),
    Case("providers-null", base(providers=None)),
    Case("provider-null", base(providers={"stripe": None})),
    Case("provider-key-uppercase", base(providers={"Stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"]}})),
    Case("provider-key-too-long", base(providers={"a" * 64: {
        "path": "/s", "preset": "stripe", "secrets": ["x"]}})),
    Case("path-missing", base(providers={"stripe": {"preset": "stripe", "secrets": ["x"]}})),
    Case("path-relative", base(providers={"stripe": {
        "path": "webhooks", "preset": "stripe", "secrets": ["x"]}})),
    Case("path-template", base(providers={"stripe": {
        "path": "/webhooks/{id}", "preset": "stripe", "secrets": ["x"]}})),
    Case("secrets-missing", base(providers={"stripe": {"path": "/s", "preset": "stripe"}})),
    Case("secrets-empty-list", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": []}})),
    Case("secret-empty-string", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": [""]}})),
    Case("secret-env-and-file", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": [{"env": "A", "file": "b"}]}})),
    Case("secret-empty-mapping", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": [{}]}})),
    Case("secret-unknown-source", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": [{"vault": "x"}]}})),
    Case("secret-number", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": [12345]}})),
    Case("preset-unknown", base(providers={"stripe": {
        "path": "/s", "preset": "strype", "secrets": ["x"]}})),
    Case("preset-not-string", base(providers={"stripe": {
        "path": "/s", "preset": ["stripe"], "secrets": ["x"]}})),
    Case("no-preset-no-signature", provider({"event_id": HEADER_ID})),
    Case("no-preset-no-event-id", provider({"signature": HMAC_PLAIN})),
    Case("listen-port-only", base(listen="8080")),
    Case("listen-port-too-big", base(listen="0.0.0.0:65536")),
    Case("listen-no-host", base(listen=":8080")),
    Case("listen-brackets-only", base(listen="[]:8080")),
    Case("listen-number", base(listen=8080)),
    Case("listen-null", base(listen=None)),
    Case("max-body-zero", base(max_body_bytes=0)),
    Case("max-body-zero-unit", base(max_body_bytes="0MiB")),
    Case("max-body-unknown-unit", base(max_body_bytes="1TB")),
    Case("max-body-negative", base(max_body_bytes=-1)),
    Case("max-body-bool", base(max_body_bytes=True)),
    Case("duration-words", base(shutdown_timeout="ten seconds")),
    Case("duration-negative", base(shutdown_timeout=-1)),
    Case("duration-bool", base(shutdown_timeout=True)),
    Case("duration-unit-us", base(shutdown_timeout="10us")),
    Case("duration-list", base(shutdown_timeout=["1s"])),
    Case("maintenance-interval-zero", base(maintenance={"interval": "0s"})),
    Case("maintenance-reload-zero", base(maintenance={"secrets_reload_interval": 0})),
    Case("maintenance-batch-zero", base(maintenance={"retention_batch_size": 0})),
    Case("log-level-unknown", base(log={"level": "verbose"})),
    Case("log-format-unknown", base(log={"format": "xml"})),
    Case("log-list", base(log=["info"])),
    Case("store-mysql", base(store={"url": "mysql://x"})),
    Case("store-sqlite-no-path", base(store={"url": "sqlite:///"})),
    Case("store-url-number", base(store={"url": 5})),
    Case("store-pool-max-zero", base(store={"pool_max_size": 0})),
    Case("store-pool-min-negative", base(store={"pool_min_size": -1})),
    Case("store-cache-negative", base(store={"statement_cache_size": -1})),
    Case("store-pool-string", base(store={"pool_max_size": "10"})),
    Case("upstream-connections-zero", base(upstream={"url": "http://a", "max_connections": 0})),
    Case("upstream-connections-bool", base(upstream={"url": "http://a",
                                                     "max_connections": True})),
    Case("admin-token-short", base(admin_token="short")),
    Case("admin-token-number", base(admin_token=12345678901234567890)),
    Case("statuses-2xx-number", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "final_statuses": [200]}})),
    Case("statuses-2xx-class", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "final_statuses": ["2xx"]}})),
    Case("statuses-600", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "final_statuses": [600]}})),
    Case("statuses-upper-class", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "final_statuses": ["5XX"]}})),
    Case("statuses-not-list", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "final_statuses": "5xx"}})),
    Case("statuses-bool", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "final_statuses": [True]}})),
    Case("mismatch-policy-unknown", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "on_payload_mismatch": "drop"}})),
    Case("store-payload-string", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "store_payload": "yes"}})),
    Case("lease-bool", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "lease": False}})),
    Case("signature-unknown-key", acme({**HMAC_PLAIN, "digest": "sha256"})),
    Case("signature-algorithm-unknown", acme({**HMAC_PLAIN, "algorithm": "md5"})),
    Case("signature-algorithm-missing", acme({k: v for k, v in HMAC_PLAIN.items()
                                              if k != "algorithm"})),
    Case("signature-encoding-unknown", acme({**HMAC_PLAIN, "encoding": "base32"})),
    Case("signature-encoding-missing", acme({k: v for k, v in HMAC_PLAIN.items()
                                             if k != "encoding"})),
    Case("signature-message-missing", acme({k: v for k, v in HMAC_PLAIN.items()
                                            if k not in ("message", "timestamp")})),
    Case("signature-header-invalid", acme({**HMAC_PLAIN, "header": "X Acme"})),
    Case("signature-header-missing", acme({k: v for k, v in HMAC_PLAIN.items()
                                           if k != "header"})),
    Case("format-type-unknown", acme({**HMAC_PLAIN, "format": {"type": "json"}})),
    Case("format-type-missing", acme({**HMAC_PLAIN, "format": {"prefix": "x"}})),
    Case("format-key-of-other-type", acme({**HMAC_PLAIN, "format": {
        "type": "plain", "signature_keys": ["v1"]}})),
    Case("kv-list-without-keys", acme({**KV_LIST, "format": {"type": "kv_list",
                                                             "timestamp_key": "t"}})),
    Case("kv-list-keys-empty", acme({**KV_LIST, "format": {
        "type": "kv_list", "signature_keys": [], "timestamp_key": "t"}})),
    Case("kv-list-separator-empty", acme({**KV_LIST, "format": {
        "type": "kv_list", "signature_keys": ["v1"], "timestamp_key": "t",
        "pair_separator": ""}})),
    Case("versioned-algorithm-unknown", provider({
        "signature": {**VERSIONED, "format": {**VERSIONED["format"],
                                              "algorithms": {"v1a": "rsa"}}},
        "event_id": HEADER_ID, "secrets": [SW_SECRET]})),
    Case("message-without-body", acme({**HMAC_PLAIN, "message": "{timestamp}"})),
    Case("message-escaped-body", acme({**HMAC_PLAIN, "message": "{timestamp}.{{body}}"})),
    Case("message-unknown-placeholder", acme({**HMAC_PLAIN, "message": "{timestamp}{body}{id}"})),
    Case("message-unbalanced", acme({**HMAC_PLAIN, "message": "{timestamp}.{body"})),
    Case("message-bad-header-placeholder", acme({**HMAC_PLAIN,
                                                 "message": "{header:A B}{timestamp}{body}"})),
    Case("secret-encoding-unknown", acme({**HMAC_PLAIN, "secret": {"encoding": "rot13"}})),
    Case("secret-spec-unknown-key", acme({**HMAC_PLAIN, "secret": {"prefix": "x"}})),
    Case("timestamp-header-and-from", acme({**HMAC_PLAIN, "timestamp": {
        "header": "X-Ts", "from": "signature"}})),
    Case("timestamp-no-source", acme({**HMAC_PLAIN, "timestamp": {"unit": "s"}})),
    Case("timestamp-unit-unknown", acme({**HMAC_PLAIN, "timestamp": {
        "header": "X-Ts", "unit": "us"}})),
    Case("timestamp-direction-unknown", acme({**HMAC_PLAIN, "timestamp": {
        "header": "X-Ts", "direction": "future"}})),
    Case("timestamp-tolerance-zero", acme({**HMAC_PLAIN, "timestamp": {
        "header": "X-Ts", "tolerance": 0}})),
    Case("timestamp-from-other", acme({**KV_LIST, "timestamp": {"from": "header"}})),
    Case("token-with-message", acme({**TOKEN, "message": "{body}"})),
    Case("token-with-append-query", acme({**TOKEN, "append_query": False})),
    Case("append-query-string", acme({**URL_SIGNED, "append_query": "yes"})),
    Case("url-not-http", acme({**URL_SIGNED, "url": "ftp://example.com/x"})),
    Case("url-credentials", acme({**URL_SIGNED, "url": "https://u:p@example.com/x"})),
    Case("url-fragment", acme({**URL_SIGNED, "url": "https://example.com/x#y"})),
    Case("event-id-two-sources", acme(event_id={"header": "X-Id", "json": "$.id"})),
    Case("event-id-no-source", acme(event_id={"max_length": 10})),
    Case("event-id-unknown-key", acme(event_id={"jsonpath": "$.id"})),
    Case("event-id-json-no-dollar", acme(event_id={"json": "id"})),
    Case("event-id-json-root", acme(event_id={"json": "$"})),
    Case("event-id-json-wildcard", acme(event_id={"json": "$.items[*].id"})),
    Case("event-id-json-bad-step", acme(event_id={"json": "$..id"})),
    Case("event-id-max-length-zero", acme(event_id={"header": "X-Id", "max_length": 0})),
    Case("event-id-max-length-bool", acme(event_id={"header": "X-Id", "max_length": True})),
    Case("composite-one-part", acme(event_id={"composite": [{"json": "$.a"}]})),
    Case("composite-all-optional", acme(event_id={"composite": [
        {"json": "$.a", "optional": True}, {"json": "$.b", "optional": True}]})),
    Case("composite-part-two-sources", acme(event_id={"composite": [
        {"json": "$.a", "header": "X-A"}, {"json": "$.b"}]})),
    Case("composite-part-empty", acme(event_id={"composite": [{}, {"json": "$.b"}]})),
    Case("composite-optional-string", acme(event_id={"composite": [
        {"json": "$.a", "optional": "no"}, {"json": "$.b"}]})),
    Case("batch-items-without-wildcard", acme(event_id={"batch": {
        "items": "$.events", "item_id": {"json": "$.id"}}})),
    Case("batch-nested", acme(event_id={"batch": {"items": "$[*]", "item_id": {
        "batch": {"items": "$[*]", "item_id": {"json": "$.id"}}}}})),
    Case("batch-missing-item-id", acme(event_id={"batch": {"items": "$[*]"}})),
    Case("handshake-missing-respond", acme(handshake={"when": {"json": "$.t", "equals": 1}})),
    Case("handshake-json-and-text", acme(handshake={
        "when": {"json": "$.t", "equals": 1},
        "respond": {"json": {}, "text": "$.c"}})),
    Case("handshake-status-500", acme(handshake={
        "when": {"json": "$.t", "equals": 1}, "respond": {"json": {}, "status": 500}})),
    Case("handshake-when-three-keys", acme(handshake={
        "when": {"json": "$.t", "header": "X-T", "equals": 1}, "respond": {"json": {}}})),
    Case("handshake-header-equals-number", acme(handshake={
        "when": {"header": "X-T", "equals": 1}, "respond": {"json": {}}})),
    Case("handshake-bad-path-value", acme(handshake={
        "when": {"json": "$.t", "equals": 1}, "respond": {"json": {"c": "$bad"}}})),
    Case("handshake-bad-hmac-path", acme(handshake={
        "when": {"json": "$.t", "equals": 1},
        "respond": {"json": {"c": {"hmac_sha256_hex": "challenge"}}}})),
    Case("handshake-unknown-key", acme(handshake={
        "when": {"json": "$.t", "equals": 1}, "respond": {"json": {}}, "if": 1})),
    Case("plugin-unknown", provider({"signature": {"plugin": "paypal"},
                                     "event_id": HEADER_ID})),
    Case("plugin-twilio-without-url", provider({"signature": {"plugin": "twilio"},
                                                "event_id": HEADER_ID})),
    Case("plugin-twilio-algorithm", provider({"signature": {
        "plugin": "twilio", "url": "https://e.com/x", "algorithm": "md5"},
        "event_id": HEADER_ID})),
    Case("plugin-adyen-extra-key", provider({"signature": {"plugin": "adyen", "url": "https://e.com"},
                                             "event_id": HEADER_ID})),
    Case("plugin-mailgun-tolerance-zero", provider({"signature": {
        "plugin": "mailgun", "tolerance": 0}, "event_id": HEADER_ID})),
    Case("plugin-secret-prefix", provider({"signature": {
        "plugin": "adyen", "secret": {"strip_prefix": "x"}}, "event_id": HEADER_ID})),
    Case("override-unknown-signature-key", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "signature": {"hdr": "X"}}})),
    Case("override-bad-tolerance", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "signature": {"timestamp": {"tolerance": "soon"}}}})),
    Case("override-unknown-event-id-key", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "event_id": {"id": "$.id"}}})),
    Case("override-bad-json-path", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "event_id": {"json": "id"}}})),
]

# The schema accepts these; the loader rejects them on a rule JSON Schema cannot express.
# ``rule`` is the index of that rule in sidecar.config.loader.LOADER_ONLY_RULES.
LOADER_ONLY: list[Case] = [
    Case("interpolation-unset", base(shutdown_timeout="${UNSET_DURATION}"), rule=0),
    Case("interpolation-bad-value", base(shutdown_timeout="${NOT_A_DURATION}"), rule=0),
    Case("admin-equals-listen", base(listen="127.0.0.1:9000", admin_listen="127.0.0.1:9000"),
         rule=1),
    Case("pool-min-over-max", base(store={"pool_min_size": 5, "pool_max_size": 2}), rule=2),
    Case("duplicate-paths", base(providers={
        "stripe": {"path": "/w", "preset": "stripe", "secrets": ["x"]},
        "github": {"path": "/w", "preset": "github", "secrets": ["x"]}}), rule=3),
    Case("lease-not-over-timeout", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "lease": "10s"}}), rule=4),
    Case("inflight-wait-over-lease", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "lease": "20s",
        "inflight_wait": "30s"}}), rule=4),
    Case("retention-not-over-lease", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "retention": "60s"}}), rule=4),
    Case("secret-env-unset", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": [{"env": "UNSET_SECRET"}]}}), rule=5),
    Case("secret-file-missing", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": [{"file": "missing.txt"}]}}), rule=5),
    Case("secret-file-empty", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": [{"file": "empty-secret.txt"}]}}), rule=5),
    Case("secret-not-base64", base(providers={"sw": {
        "path": "/s", "preset": "standard-webhooks", "secrets": ["whsec_not base64!"]}}), rule=5),
    Case("preset-merge-format-type", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "signature": {"format": {"type": "plain"}}}}), rule=6),
    Case("preset-twilio-without-url", base(providers={"twilio": {
        "path": "/t", "preset": "twilio", "secrets": ["x"]}}), rule=6),
    Case("message-timestamp-without-timestamp", acme({**HMAC_PLAIN, "timestamp": None}),
         rule=7),
    Case("timestamp-without-message-timestamp", acme({**HMAC_PLAIN, "message": "{body}"}),
         rule=7),
    Case("separators-equal", acme({**KV_LIST, "format": {**KV_LIST["format"],
                                                         "kv_separator": ","}}), rule=7),
    Case("url-without-url-placeholder", acme({**HMAC_PLAIN,
                                              "url": "https://example.com/x"}), rule=7),
    Case("url-placeholder-without-url", acme({**URL_SIGNED, "url": None}), rule=7),
    Case("timestamp-key-without-from", acme({**KV_LIST, "timestamp": {"header": "X-Ts"}}),
         rule=7),
    Case("versioned-algorithm-unlisted-version", provider({
        "signature": {**VERSIONED, "format": {**VERSIONED["format"],
                                              "algorithms": {"v2": "ed25519"}}},
        "event_id": HEADER_ID, "secrets": [SW_SECRET]}), rule=7),
    Case("mixed-keys-without-public-prefix", provider({
        "signature": {**VERSIONED, "secret": {"encoding": "base64", "strip_prefix": "whsec_"}},
        "event_id": HEADER_ID, "secrets": [SW_SECRET]}), rule=7),
    Case("url-bad-port", acme({**URL_SIGNED, "url": "https://example.com:99999/x"}), rule=8),
    Case("integral-float", base(upstream={"url": "http://a", "max_connections": 100.0}),
         rule=9),
    Case("duration-overflow", base(shutdown_timeout="9" * 400), rule=10),
    Case("trusted-proxies-host-bits", base(trusted_proxies=["10.0.0.1/8"]), rule=11),
    Case("trusted-proxies-bad-ipv6", base(trusted_proxies=["fd00::1::2"]), rule=11),
    Case("trusted-proxies-ipv4-mapped", base(trusted_proxies=["::ffff:10.0.0.0/104"]), rule=11),
    Case("queue-batch-provider", base(providers={"sendgrid": {
        "path": "/sg", "preset": "sendgrid", "mode": "queue", "secrets": [SENDGRID_TEST_KEY]}}),
         rule=12),
    Case("queue-retry-delays-reversed", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "mode": "queue",
        "queue": {"first_retry": "10s", "max_retry_delay": "5s"}}}), rule=12),
    Case("queue-order-key-wildcard", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "mode": "queue",
        "queue": {"order_key": "$.items[*].id"}}}), rule=12),
    Case("queue-order-key-not-a-path", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "mode": "queue",
        "queue": {"order_key": "data.object"}}}), rule=12),
    Case("partitioning-on-sqlite", base(store={"url": "sqlite:///x.db",
                                               "partitioning": {"interval": "1d"}}), rule=13),
    Case("partitioning-under-a-minute", base(store={"url": "postgresql://db/x",
                                                    "partitioning": {"interval": "30s"}}),
         rule=13),
]


# filters: what JSON Schema says alike
INVALID += [
    Case("filter-empty", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "filter": {}}})),
    Case("filter-unknown-operator", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "filter": {"when": [{"path": "$.a", "matches": "b"}]}}})),
    Case("filter-two-operators", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "filter": {"when": [{"path": "$.a", "equals": 1, "exists": True}]}}})),
    Case("filter-empty-types", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "filter": {"types": {}}}})),
    Case("filter-bad-path", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "filter": {"when": [{"path": "livemode", "equals": True}]}}})),
    Case("event-type-two-sources", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "event_type": {"header": "X-T", "json": "$.type"}}})),
    Case("store-outage-unknown", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "store_outage": "open"}})),
]
LOADER_ONLY += [
    Case("filter-types-without-event-type", base(providers={"svix": {
        "path": "/s", "preset": "svix", "secrets": [SW_SECRET],
        "filter": {"types": {"drop": ["a.*"]}}}}), rule=15),
    Case("filter-unclosed-bracket", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"],
        "filter": {"types": {"allow": ["invoice.[paid"]}}}}), rule=15),
    Case("store-outage-forward-in-queue-mode", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "mode": "queue",
        "store_outage": "forward"}}), rule=15),
]

# Once loader findings (found by the schema agreement tests), now rejected by both.
INVALID += [
    Case("upstream-url-without-host", base(upstream={"url": "http://"})),
    Case("description-not-text", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "description": 42}})),
    Case("unicode-digits-port", base(listen="0.0.0.0:\u0668\u0660\u0668\u0660")),
    Case("unicode-digits-size", base(max_body_bytes="\u0665MiB")),
    Case("unicode-digits-json-path", base(providers={"stripe": {
        "path": "/s", "preset": "stripe", "secrets": ["x"], "event_id": {"json": "$.a[\u0663]"}}})),
    Case("superscript-port", base(listen="0.0.0.0:\u00b2")),
]

# notify: targets.
VALID += [
    Case("notify-targets", base(notify={
        "interval": "10m", "dead_letters": None, "signature_failures": {"count": None},
        "targets": [
            {"url": "https://ops.example.com/hook", "secret": SW_SECRET,
             "events": ["breaker.opened", "dead_letters.threshold"],
             "headers": {"Authorization": "Bearer x"}},
            {"url": "http://chat.internal/hooks/T/B/x", "format": "slack"},
            {"url": "https://ops.example.com/other", "format": "standard",
             "secret": {"env": "NOTIFY_SECRET"}}]}), env={**ENV, "NOTIFY_SECRET": SW_SECRET}),
]
INVALID += [
    Case("notify-url-not-http", base(notify={"targets": [
        {"url": "ftp://ops.example.com/hook", "secret": SW_SECRET}]})),
    Case("notify-standard-without-secret", base(notify={"targets": [
        {"url": "https://ops.example.com/hook"}]})),
    Case("notify-unknown-kind", base(notify={"targets": [
        {"url": "https://ops.example.com/hook", "secret": SW_SECRET,
         "events": ["breaker.open"]}]})),
    Case("notify-unknown-key", base(notify={"targets": [
        {"uri": "https://ops.example.com/hook", "format": "slack"}]})),
]
LOADER_ONLY += [
    Case("notify-slack-with-secret", base(notify={"targets": [
        {"url": "https://chat.example.com/x", "format": "slack", "secret": SW_SECRET}]}),
         rule=14),
    Case("notify-secret-not-whsec", base(notify={"targets": [
        {"url": "https://ops.example.com/hook", "secret": "not-a-whsec-secret"}]}), rule=14),
]


# fan-out: destinations.
_FANNED = {"path": "/s", "preset": "stripe", "secrets": ["x"], "mode": "queue",
           "destinations": [{"name": "billing", "upstream": {"url": "http://billing"}},
                            {"name": "crm", "upstream": {"url": "http://crm", "timeout": "5s"},
                             "delivery": {"rate": "10/s"},
                             "filter": {"types": {"allow": ["customer.*"]}}}]}
VALID += [
    Case("destinations", {"providers": {"stripe": _FANNED}}),
    Case("destinations-top-level-url", base(providers={"stripe": {
        **_FANNED, "destinations": [{"name": "billing"}]}})),
]
INVALID += [
    Case("destinations-forward-mode", base(providers={"stripe": {**_FANNED, "mode": "forward"}})),
    Case("destinations-without-mode", {"providers": {"stripe": {
        k: v for k, v in _FANNED.items() if k != "mode"}}}),
    Case("destinations-beside-upstream", base(providers={"stripe": {
        **_FANNED, "upstream": {"url": "http://app"}}})),
    Case("destinations-beside-delivery", base(providers={"stripe": {
        **_FANNED, "delivery": {"rate": "5/s"}}})),
    Case("destination-without-url", {"providers": {"stripe": {
        **_FANNED, "destinations": [{"name": "billing"}]}}}),
    Case("destination-bad-name", base(providers={"stripe": {
        **_FANNED, "destinations": [{"name": "Billing"}]}})),
    Case("destination-unknown-key", base(providers={"stripe": {
        **_FANNED, "destinations": [{"name": "billing", "url": "http://billing"}]}})),
]
LOADER_ONLY += [
    Case("destinations-same-name", base(providers={"stripe": {
        **_FANNED, "destinations": [{"name": "billing"}, {"name": "billing"}]}}), rule=16),
    Case("destination-timeout-over-lease", base(providers={"stripe": {
        **_FANNED, "destinations": [{"name": "billing", "upstream": {"timeout": "90s"}}]}}),
         rule=16),
]
