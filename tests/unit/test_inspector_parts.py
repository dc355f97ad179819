"""The inspector's pure parts: sessions and CSRF tokens, masking, the attempts timeline and the
overview's rates from counter samples."""

from __future__ import annotations

import json
from typing import Any

from sidecar.config.loader import parse_config
from sidecar.http.ui.auth import SESSION_SECONDS, Authenticator, Operator
from sidecar.http.ui.masking import MASK, Masker
from sidecar.http.ui.overview import WINDOW, CounterHistory, Counts
from sidecar.http.ui.templating import printable
from sidecar.http.ui.viewmodels import (
    IN_FLIGHT,
    NO_RESULT,
    request_view,
    response_view,
    timeline,
)
from sidecar.obs.metrics import Metrics
from tests.support import base_config

TOKEN = "unit-admin-token-0123456789"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_session_is_derived_from_the_token_expires_and_survives_a_new_process() -> None:
    clock = Clock()
    gate = Authenticator(TOKEN, clock=clock)
    session = gate.new_session()
    assert TOKEN not in session and gate.session_valid(session)
    # Another process (a replaced first worker) with the same token accepts it.
    assert Authenticator(TOKEN, clock=clock).session_valid(session)
    assert not Authenticator("another-token-0123456789", clock=clock).session_valid(session)
    expires, _, mac = session.partition(".")
    assert not gate.session_valid(f"{int(expires) + 3600}.{mac}")  # a moved expiry
    clock.now += SESSION_SECONDS + 1
    assert not gate.session_valid(session)


def test_a_malformed_session_cookie_is_no_session_never_an_error() -> None:
    gate = Authenticator(TOKEN, clock=Clock())
    _, _, mac = gate.new_session().partition(".")
    for value in ("\u00b2.x", "\u0661\u0662.x", "9" * 5000 + ".x", "9" * 13 + "." + mac,
                  "9999999999.\u00e9", "9999999999.\udcc3\udca9", "", ".", "x", "1e10.x",
                  "-1.x", " 9999999999.x"):
        assert not gate.session_valid(value), value


def test_a_csrf_token_is_bound_to_the_session_and_the_form() -> None:
    gate = Authenticator(TOKEN)
    alice = Operator(gate.new_session(), gate.fingerprint, "127.0.0.1")
    token = gate.csrf(alice, "/ui/events/stripe/e/redrive")
    assert gate.csrf_valid(alice, "/ui/events/stripe/e/redrive", token)
    assert not gate.csrf_valid(alice, "/ui/events/stripe/e/release", token)
    assert not gate.csrf_valid(alice, "/ui/events/stripe/e/redrive", None)
    other = Operator("bearer", gate.fingerprint, "127.0.0.1")
    assert not gate.csrf_valid(other, "/ui/events/stripe/e/redrive", token)


def test_without_a_token_csrf_tokens_die_with_the_process() -> None:
    """The per-process key: a form from a replaced worker is refused ("reload")."""
    operator = Operator("loopback", "loopback", "127.0.0.1")
    first, second = Authenticator(None), Authenticator(None)
    assert first.fingerprint == "loopback" and not first.needs_login
    assert not second.csrf_valid(operator, "/ui/logout", first.csrf(operator, "/ui/logout"))


def test_masking_uses_the_providers_signature_headers_and_the_generic_list() -> None:
    config = base_config("http://127.0.0.1:9", "sqlite:///unused.db")
    # A provider whose signature header's name says nothing of signatures.
    config["providers"]["github"]["signature"] = {"header": "X-Plain-Mac"}
    masker = Masker(parse_config(config, env={}))
    shown = dict(masker.headers([("X-Plain-Mac", "abc"), ("Stripe-Signature", "t=1,v1=x"),
                                 ("Authorization", "Bearer t"), ("Cookie", "a=b"),
                                 ("X-Shopify-Hmac-Sha256", "h"), ("Content-Type", "x/y"),
                                 ("X-Id", "e1")]))
    assert shown == {"X-Plain-Mac": MASK, "Stripe-Signature": MASK, "Authorization": MASK,
                     "Cookie": MASK, "X-Shopify-Hmac-Sha256": MASK, "Content-Type": "x/y",
                     "X-Id": "e1"}
    assert masker.json_text("not json") is None


def test_everything_under_a_sensitive_json_member_is_masked_its_shape_kept() -> None:
    masker = Masker(parse_config(base_config("http://127.0.0.1:9", "sqlite:///unused.db"),
                                 env={}))
    body = ('{"signature": {"value": "v1", "timestamp": 1, "parts": ["p", {"n": null}]},'
            ' "credentials": ["c"], "id": "e", "data": {"amount": 5}}')
    pretty = masker.json_text(body)
    assert pretty is not None
    assert json.loads(pretty) == {
        "signature": {"value": MASK, "timestamp": MASK, "parts": [MASK, {"n": MASK}]},
        "credentials": [MASK], "id": "e", "data": {"amount": 5}}


def test_query_values_under_sensitive_names_are_masked_the_names_kept() -> None:
    masker = Masker(parse_config(base_config("http://127.0.0.1:9", "sqlite:///unused.db"),
                                 env={}))
    shown = masker.path("/webhooks/x?token=T1&page=2&api_key=K&Sig=S&code=C&auth=A"
                        "&pass=P&x%2Dsignature=X&flag&note=a=b")
    assert shown == (f"/webhooks/x?token={MASK}&page=2&api_key={MASK}&Sig={MASK}&code={MASK}"
                     f"&auth={MASK}&pass={MASK}&x%2Dsignature={MASK}&flag&note=a=b")
    assert masker.path("/webhooks/x") == "/webhooks/x"


def test_names_with_key_or_sig_as_a_part_are_masked_identifiers_shown() -> None:
    masker = Masker(parse_config(base_config("http://127.0.0.1:9", "sqlite:///unused.db"),
                                 env={}))
    for name in ("Ocp-Apim-Subscription-Key", "Paypal-Transmission-Sig", "X-Private-Key",
                 "sig-v2", "key.id"):
        assert masker.sensitive(name), name
    for name in ("Idempotency-Key", "X-Idempotency-Key", "Paypal-Transmission-Id",
                 "Paypal-Cert-Url", "Keep-Alive", "X-Monkey", "Content-Type", "key", "sig"):
        assert not masker.sensitive(name), name
    shown = masker.path("/webhooks/x?private_key=P&webhook_key=W&key=K&monkey=M")
    assert shown == f"/webhooks/x?private_key={MASK}&webhook_key={MASK}&key={MASK}&monkey=M"
    pretty = masker.json_text('{"private_key": "P", "webhook_key": "W", "key": "ISSUE-1",'
                              ' "idempotency_key": "I"}')
    assert pretty is not None and json.loads(pretty) == {
        "private_key": MASK, "webhook_key": MASK, "key": "ISSUE-1", "idempotency_key": "I"}


def test_a_stored_body_that_is_not_json_is_described_never_shown() -> None:
    """Request and response alike: a form or text body may hold credentials under names
    masking cannot see."""
    masker = Masker(parse_config(base_config("http://127.0.0.1:9", "sqlite:///unused.db"),
                                 env={}))
    form = {"method": "POST", "path": "/webhooks/x", "body_text": "password=hunter2",
            "body_base64": None, "headers": [["Content-Type", "application/x-www-form-urlencoded"]]}
    seen = request_view(masker, form)
    assert seen is not None and seen["json"] is None and seen["size"] == 16
    assert seen["content_type"] == "application/x-www-form-urlencoded"
    answer = {"response_status": 500, "response_headers": [["Content-Type", "text/plain"]],
              "response_body_text": "token=abc", "response_body_base64": "dG9rZW49YWJj"}
    seen = response_view(masker, answer)
    assert seen is not None and seen["json"] is None and "hunter2" not in str(seen)
    assert seen["size"] == 9 and seen["content_type"] == "text/plain"
    assert "token=abc" not in str(seen)
    binary = {**answer, "response_body_text": None, "response_body_base64": "/w=="}
    assert (response_view(masker, binary) or {})["size"] == 1


def test_undecodable_bytes_are_shown_escaped() -> None:
    assert printable("caf\udce9") == "caf\\xe9"
    assert printable("\ud800 ok \U0001f600") == "\\ud800 ok \U0001f600"
    assert printable("plain é") == "plain é"


def event(state: str, attempt: int, attempts: list[dict[str, Any]], *,
          live: bool = False) -> dict[str, Any]:
    return {"state": state, "attempt": attempt, "lease_live": live, "attempts": attempts}


def recorded(number: int, finished: float) -> dict[str, Any]:
    return {"attempt": number, "finished_at": finished, "status": 500}


def test_the_timeline_names_attempts_without_a_record() -> None:
    entries = timeline(event("failed", 3, [recorded(1, 10.0), recorded(3, 30.0)]))
    assert [(e["attempt"], e["recorded"], e.get("note")) for e in entries] == [
        (1, True, None), (2, False, NO_RESULT), (3, True, None)]
    live = timeline(event("processing", 2, [recorded(1, 10.0)], live=True))
    assert [(e["attempt"], e.get("note")) for e in live] == [(1, None), (2, IN_FLIGHT)]
    # Queue mode may record one number twice (a try that never reached the app gave it back).
    repeated = timeline(event("dead", 1, [recorded(1, 20.0), recorded(1, 10.0)]))
    assert [e["finished_at"] for e in repeated] == [10.0, 20.0]
    # Before the attempts are recorded by this version: every number is a gap.
    assert [e["note"] for e in timeline({"state": "done", "attempt": 1,
                                         "lease_live": False})] == [NO_RESULT]
    # So the note does not blame a crash for an attempt older than the attempts table.
    assert "predates the attempts timeline" in NO_RESULT


def test_rates_are_totals_since_start_until_a_minute_of_samples_exists() -> None:
    metrics = Metrics()
    clock = Clock(0.0)
    history = CounterHistory(metrics, clock=clock)
    metrics.events.labels("stripe", "new").inc(4)
    history.sample()
    early = history.rates()
    assert not early.per_minute and early.counts["stripe"] == Counts(deliveries=4.0)
    clock.now = WINDOW * 2  # two minutes later
    metrics.events.labels("stripe", "new").inc(10)
    metrics.events.labels("stripe", "duplicate").inc(6)
    metrics.app_answers.labels("stripe", "http://app:80", "5xx").inc(2)
    metrics.app_answers.labels("stripe", "http://app:80", "2xx").inc(8)
    later = history.rates()
    assert later.per_minute
    assert later.counts["stripe"] == Counts(deliveries=8.0, duplicates=3.0, non_2xx=1.0)
