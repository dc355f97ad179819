"""The admin API's OpenAPI 3.1 description (``sidecar/http/openapi.json``, served at
``/admin/openapi.json``; ``docs/openapi.json`` is the same file).

It is valid OpenAPI 3.1 (openapi-spec-validator); it describes exactly the routes the admin
listener registers, the inspector's ``/ui/`` excepted (HTML for a browser, not an API); and real
answers — over real HTTP on loopback, from a real SQLite store holding events in every state,
queue mode's dead ones included, and the errors — match its schemas (JSON Schema 2020-12, the
dialect of OpenAPI 3.1), declare every field they carry, and cover every answer it describes.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import tomllib
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from sidecar.config.loader import parse_config
from sidecar.core.events import (
    AttemptResult,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
    StoredRequest,
)
from sidecar.core.workergroup import GroupHealth
from sidecar.http.openapi import description
from sidecar.ops import listing
from sidecar.runtime.serve import Running, start, stop
from sidecar.runtime.wiring import build_apps
from sidecar.store.sqlite import SQLiteStore
from tests.acceptance.test_admin_access import non_loopback_address
from tests.support import REPO, StubApp, base_config

SPEC: dict[str, Any] = json.loads(description())
TOKEN = "openapi-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
NOT_API = "/ui/"  # the events inspector: HTML pages and forms, described in docs/operations.md
BODY = hashlib.sha256(b'{"id": "evt"}').digest()


# == the description itself ==================================================================


def test_the_description_is_valid_openapi_3_1_and_docs_holds_the_same_file() -> None:
    validate_openapi(SPEC)
    assert SPEC["openapi"].startswith("3.1.")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert SPEC["info"]["version"] == project["version"], "set info.version at each release"
    assert (REPO / "docs" / "openapi.json").read_bytes() == description(), (
        "docs/openapi.json differs from sidecar/http/openapi.json: copy the package's file over")


def registered(app: web.Application) -> set[tuple[str, str]]:
    """(method, path template) of every route the admin app serves, ``/ui/`` excepted. aiohttp
    adds a HEAD route beside each GET: HEAD is GET's answer without a body, not described."""
    routes = set()
    for route in app.router.routes():
        template = route.resource.canonical if route.resource is not None else ""
        if route.method != "HEAD" and not (template + "/").startswith(NOT_API):
            routes.add((route.method.lower(), template))
    return routes


def described(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, item in spec["paths"].items()
            for method in item if method in METHODS}


def test_every_admin_route_is_described_and_nothing_else() -> None:
    admin = build_apps(parse_config(config("http://127.0.0.1:9"), env={})).admin
    assert registered(admin) == described(SPEC)
    assert any(path.startswith(NOT_API) for _, path in _all_routes(admin)), (
        "the inspector moved: update NOT_API")
    # The comparison sees a route added without a description.
    admin.router.add_get("/admin/undescribed", nothing)
    assert registered(admin) - described(SPEC) == {("get", "/admin/undescribed")}


async def nothing(_: web.Request) -> web.Response:
    return web.Response()


def _all_routes(app: web.Application) -> set[tuple[str, str]]:
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource}


# == checking an answer against the description ==============================================


def strict(node: Any, *, close: bool = True) -> Any:
    """The description with every object schema closed (``unevaluatedProperties: false``) where
    it is used, so an answer carrying a field the description does not declare fails. The
    published description leaves them open: clients ignore fields added later. Closed at each
    use (a ``$ref``, an inline object), never in the parts an ``allOf`` combines (closing one
    would refuse its siblings' fields) nor at a component's root (reached through a ``$ref``)."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: ([strict(part, close=False) for part in value] if key == "allOf"
                 else strict(value)) for key, value in node.items()}
    if close and (node.get("$ref", "").startswith("#/components/schemas/")
                  or "properties" in node):
        out["unevaluatedProperties"] = False
    return out


def _closed_spec() -> dict[str, Any]:
    closed = copy.deepcopy(SPEC)
    closed["paths"] = strict(closed["paths"])
    schemas = closed["components"]["schemas"]
    closed["components"]["schemas"] = {name: strict(schema, close=False)
                                       for name, schema in schemas.items()}
    return closed


CLOSED = _closed_spec()
REGISTRY: Registry[Any] = Registry().with_resource("urn:openapi", Resource(CLOSED, DRAFT202012))


def pointer(*parts: str) -> str:
    return "urn:openapi#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def check(instance: Any, ref: str) -> None:
    """Raises ``jsonschema.ValidationError`` unless ``instance`` matches the schema at ``ref``."""
    validator = jsonschema.Draft202012Validator(
        {"$ref": ref}, registry=REGISTRY,
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = list(validator.iter_errors(instance))
    if errors:
        # The deepest: a wrong field inside an allOf part also fails the part, which leaves
        # its siblings' fields "unevaluated" at the top — true, but not the cause.
        raise max(errors, key=lambda error: len(error.absolute_path))


@dataclass(frozen=True)
class Answer:
    method: str
    template: str
    status: int
    content_type: str
    headers: dict[str, str]
    body: bytes


def conforms(answer: Answer) -> None:
    """The answer's status, media type, headers and body are as the description says."""
    operation = SPEC["paths"][answer.template][answer.method]
    where = f"{answer.method.upper()} {answer.template} {answer.status}"
    assert str(answer.status) in operation["responses"], f"{where}: status not described"
    response = operation["responses"][str(answer.status)]
    assert answer.content_type in response["content"], f"{where}: {answer.content_type}"
    for name, header in response.get("headers", {}).items():
        assert name in answer.headers, f"{where}: no {name} header"
        header_ref = header["$ref"].removeprefix("#/")
        check(answer.headers[name], pointer(*header_ref.split("/"), "schema"))
    body: Any = (json.loads(answer.body) if answer.content_type == "application/json"
                 else answer.body.decode())
    check(body, pointer("paths", answer.template, answer.method, "responses",
                        str(answer.status), "content", answer.content_type, "schema"))


# == real answers ============================================================================


def config(upstream: str, **overrides: Any) -> dict[str, Any]:
    data = base_config(upstream, "sqlite:///unused", admin_token=TOKEN, **overrides)
    stripe = data["providers"]["stripe"]
    stripe["store_payload"] = True
    data["providers"]["queued"] = {**stripe, "path": "/webhooks/queued", "mode": "queue"}
    data["providers"]["fan"] = {**stripe, "path": "/webhooks/fan", "mode": "queue",
                                "destinations": [{"name": "billing"}, {"name": "crm"}]}
    return data


class Admin:
    """Requests to a running admin listener; every answer is kept."""

    def __init__(self, client: aiohttp.ClientSession, base: str) -> None:
        self.client, self.base = client, base
        self.answers: list[Answer] = []

    async def call(self, method: str, template: str, query: str = "", *,
                   headers: dict[str, str] | None = None, base: str | None = None,
                   data: bytes | None = None, **values: str) -> Answer:
        path = template.format(**{k: urllib.parse.quote(v, safe="") for k, v in values.items()})
        url = f"{base or self.base}{path}" + (f"?{query}" if query else "")
        async with self.client.request(method.upper(), url, data=data,
                                       headers=AUTH if headers is None else headers) as resp:
            answer = Answer(method, template, resp.status, resp.content_type,
                            dict(resp.headers), await resp.read())
        self.answers.append(answer)
        return answer

    async def json(self, method: str, template: str, query: str = "", *, status: int = 200,
                   data: bytes | None = None, **values: str) -> Any:
        answer = await self.call(method, template, query, data=data, **values)
        assert answer.status == status, (template, query, answer.body)
        return json.loads(answer.body)


EVENT = "/admin/events/{provider}/{event_id}"
RELEASE = EVENT + "/release"
REDRIVE = EVENT + "/redrive"
REDRIVE_DEAD = "/admin/queue/{provider}/redrive-dead"
PROVIDERS = "/admin/providers"
PAUSE = "/admin/providers/{provider}/pause"
RESUME = "/admin/providers/{provider}/resume"
GUARDED = [("get", "/admin/events"), ("get", EVENT), ("post", RELEASE), ("post", REDRIVE),
           ("post", REDRIVE_DEAD), ("get", PROVIDERS), ("post", PAUSE), ("post", RESUME)]
KEY = {"provider": "queued", "event_id": "evt_any"}  # queue mode: redrive-dead reads the store

DONE_200 = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(
    200, (("Content-Type", "application/json"),), b'{"ok": true}'), 12.5)
FAILED_BINARY = AttemptResult(EventState.FAILED, Outcome.RESPONSE, RecordedResponse(
    503, (("Content-Type", "application/octet-stream"),), b"\xff\xfe"), 3.0)
TIMED_OUT = AttemptResult(EventState.FAILED, Outcome.TIMEOUT, None, 2000.0)


def request_for(event_id: str) -> StoredRequest:
    return StoredRequest("POST", "/webhooks/stripe", (("Content-Type", "application/json"),),
                         json.dumps({"id": event_id}).encode())


async def seed(store: SQLiteStore) -> None:
    """Forward mode: done, failed (with and without an answer), processing under a live and
    under an expired lease. Queue mode: two dead events and one waiting for its next try."""
    for event_id, result in (("evt_done", DONE_200), ("evt_failed", FAILED_BINARY),
                             ("evt_timeout", TIMED_OUT)):
        await store.claim("stripe", event_id, BODY, 30, "seed:1", request_for(event_id))
        assert await store.complete("stripe", event_id, 1, result)
    await store.claim("stripe", "evt_live", BODY, 3600, "seed:1")
    await store.claim("stripe", "evt_stuck", BODY, 0, "seed:1")
    for event_id, settlement in (
        ("evt_dead_1", Settlement(EventState.DEAD, FAILED_BINARY, error="max_attempts")),
        ("evt_dead_2", Settlement(EventState.DEAD, TIMED_OUT, reached=False, error="timeout")),
        ("evt_later", Settlement(EventState.QUEUED, TIMED_OUT, retry_in=3600, error="timeout")),
    ):
        await store.enqueue("queued", event_id, BODY, request_for(event_id))
        [work] = await store.take_queued("queued", 1, 30, "seed:1")
        assert await store.settle_queued("queued", event_id, work.tries, settlement)
    # Fan-out: the provider's event, queued for billing (dead there) and not yet for crm (its
    # fan-out try failed; not due again for an hour, so the running workers leave it).
    await store.enqueue("fan", "evt_fan", BODY,
                        replace(request_for("evt_fan"), destinations=("billing", "crm")))
    [work] = await store.take_queued("fan", 1, 30, "seed:1")
    assert await store.settle_queued("fan", "evt_fan", work.tries, Settlement(
        EventState.QUEUED, TIMED_OUT, retry_in=3600, error="store unavailable"))
    await store.enqueue("fan.billing", "evt_fan", BODY, request_for("evt_fan"))
    [work] = await store.take_queued("fan.billing", 1, 30, "seed:1")
    assert await store.settle_queued("fan.billing", "evt_fan", work.tries, Settlement(
        EventState.DEAD, FAILED_BINARY, error="max_attempts"))


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def serving(tmp_path: Path, name: str, data: dict[str, Any],
                  **build: Any) -> tuple[Running, SQLiteStore]:
    store = await SQLiteStore.open(tmp_path / f"{name}.db")
    return await start(parse_config(data, env={}), store=store, **build), store


async def exercise(admin: Admin) -> None:
    """Every operation, answering each way the description says it can (but the trouble)."""
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert (await admin.call("get", probe, headers={})).status == 200
    served = await admin.call("get", "/admin/openapi.json", headers={})  # no token needed
    assert served.status == 200 and json.loads(served.body) == SPEC

    pages, cursor = [], ""
    while True:
        page = await admin.json("get", "/admin/events", f"limit=3{cursor}")
        pages.append(page)
        if page["next"] is None:
            break
        cursor = f"&cursor={page['next']}"
    assert len(pages) == 4 and sum(len(p["events"]) for p in pages) == 10
    for query in ("state=dead", "state=queued&provider=queued", "status=5xx", "status=none",
                  "since=2000-01-01T00:00:00Z&until=4102444800&id_prefix=evt_d"):
        assert (await admin.json("get", "/admin/events", query))["events"], query
    await admin.json("get", "/admin/events", "state=gone", status=400)
    [fanned] = (await admin.json("get", "/admin/events", "provider=fan&destination=billing"))[
        "events"]
    assert (fanned["provider"], fanned["state"]) == ("fan.billing", "dead")
    await admin.json("get", "/admin/events", "destination=billing", status=400)
    unknown = await admin.json("get", "/admin/events", "provider=fan&destination=nope",
                               status=404)
    assert "billing, crm" in unknown["error"]

    for provider, event_id in (("stripe", "evt_done"), ("stripe", "evt_failed"),
                               ("stripe", "evt_timeout"), ("stripe", "evt_live"),
                               ("queued", "evt_dead_1"), ("queued", "evt_dead_2"),
                               ("queued", "evt_later")):
        shown = await admin.json("get", EVENT, provider=provider, event_id=event_id)
        assert shown["event_id"] == event_id
    await admin.json("get", EVENT, status=404, provider="stripe", event_id="evt_none")
    fan = await admin.json("get", EVENT, provider="fan", event_id="evt_fan")
    assert [(d["provider"], d["event"] and d["event"]["state"]) for d in fan["destinations"]] == [
        ("fan.billing", "dead"), ("fan.crm", None)]
    copy = await admin.json("get", EVENT, "destination=billing", provider="fan",
                            event_id="evt_fan")
    assert copy["fanned_out_from"] == {"provider": "fan", "destination": "billing"}
    assert (copy["destinations"], fan["fanned_out_from"]) == (None, None)
    await admin.json("get", EVENT, "destination=nope", status=404, provider="fan",
                     event_id="evt_fan")

    released = await admin.json("post", RELEASE, provider="stripe", event_id="evt_stuck")
    assert released["state"] == "failed" and released["forced_live_lease"] is False
    await admin.json("post", RELEASE, status=409, provider="stripe", event_id="evt_live")
    await admin.json("post", RELEASE, "force=maybe", status=400, provider="stripe",
                     event_id="evt_live")
    forced = await admin.json("post", RELEASE, "force=true", provider="stripe",
                              event_id="evt_live")
    assert forced["forced_live_lease"] is True
    await admin.json("post", RELEASE, status=404, provider="stripe", event_id="evt_none")

    forwarded = await admin.json("post", REDRIVE, provider="stripe", event_id="evt_failed")
    assert forwarded == {"action": "forwarded", "attempt": 2, "state": "done", "status": 200,
                         "outcome": "response"}
    requeued = await admin.json("post", REDRIVE, provider="queued", event_id="evt_dead_1")
    assert requeued["action"] == "requeued" and requeued["requeued"] == ["evt_dead_1"]
    await admin.json("post", REDRIVE, status=409, provider="queued", event_id="evt_later")
    await admin.json("post", REDRIVE, status=404, provider="nobody", event_id="evt_done")
    await admin.json("post", RELEASE, "destination=billing", status=409, provider="fan",
                     event_id="evt_fan")
    await admin.json("post", RELEASE, "destination=nope", status=404, provider="fan",
                     event_id="evt_fan")
    await admin.json("post", REDRIVE, "destination=nope", status=404, provider="fan",
                     event_id="evt_fan")
    await admin.json("post", REDRIVE_DEAD, "destination=nope", status=404, provider="fan")
    bulk = await admin.json("post", REDRIVE_DEAD, "destination=billing", provider="fan")
    assert bulk == {"provider": "fan.billing", "requeued": ["evt_fan"], "count": 1}

    bulk = await admin.json("post", REDRIVE_DEAD, "limit=10", provider="queued")
    assert bulk == {"provider": "queued", "requeued": ["evt_dead_2"], "count": 1}
    await admin.json("post", REDRIVE_DEAD, "limit=0", status=400, provider="queued")
    await admin.json("post", REDRIVE_DEAD, status=404, provider="nobody")
    await admin.json("post", REDRIVE_DEAD, status=409, provider="stripe")

    await providers(admin)

    for method, template in GUARDED:  # without the token
        answer = await admin.call(method, template, headers={}, **KEY)
        assert answer.status == 401, template


async def providers(admin: Admin) -> None:
    """Pause and resume: changed or not, force for a forward-mode provider that does not retry
    (GitHub), bad bodies, unknown providers."""
    listed = await admin.json("get", PROVIDERS)
    assert [p["provider"] for p in listed["providers"]] == [
        "stripe", "github", "slack", "queued", "fan", "fan.billing", "fan.crm"]
    assert all(p["delivering"] and not p["paused"] for p in listed["providers"])
    paused = await admin.json("post", PAUSE, provider="queued", data=b'{"reason": "deploy"}')
    assert (paused["paused"], paused["changed"], paused["pause_reason"]) == (True, True, "deploy")
    again = await admin.json("post", PAUSE, provider="queued")
    assert (again["paused"], again["changed"], again["pause_reason"]) == (True, False, "deploy")
    refused = await admin.json("post", PAUSE, status=409, provider="github")
    assert "does not retry" in refused["error"]
    forced = await admin.json("post", PAUSE, provider="github", data=b'{"force": true}')
    assert forced["paused"] and forced["retries"] is False
    await admin.json("post", PAUSE, status=400, provider="stripe", data=b"[1]")
    await admin.json("post", PAUSE, status=400, provider="stripe", data=b'{"force": "yes"}')
    await admin.json("post", PAUSE, status=404, provider="nobody")
    for name in ("queued", "github"):
        resumed = await admin.json("post", RESUME, provider=name)
        assert (resumed["paused"], resumed["changed"]) == (False, True)
    await admin.json("post", RESUME, status=404, provider="nobody")
    paused = await admin.json("post", PAUSE, "destination=crm", provider="fan")
    assert (paused["provider"], paused["paused"]) == ("fan.crm", True)
    await admin.json("post", PAUSE, "destination=nope", status=404, provider="fan")
    resumed = await admin.json("post", RESUME, "destination=crm", provider="fan")
    assert (resumed["provider"], resumed["paused"]) == ("fan.crm", False)
    await admin.json("post", RESUME, "destination=nope", status=404, provider="fan")


async def trouble(admin: Admin, store: SQLiteStore, base: str, outside: str) -> None:
    """No admin_token, from another host or from another website's page: 403, but the
    description is served (it is open, like /healthz). The store closed: 503 (and /readyz's).
    The group's supervisor silent: /healthz's 503."""
    served = await admin.call("get", "/admin/openapi.json", headers={}, base=outside)
    assert served.status == 200 and served.body == description()
    for method, template in GUARDED:
        answer = await admin.call(method, template, headers={}, base=outside, **KEY)
        assert answer.status == 403, template
        # From loopback, what another website's page makes a browser send: refused as well.
        browser = ({"Host": "attacker.example"} if method == "get"
                   else {"Origin": "https://attacker.example"})
        answer = await admin.call(method, template, headers=browser, base=base, **KEY)
        assert answer.status == 403, (template, answer.body)
    await store.close()
    for method, template in GUARDED:
        answer = await admin.call(method, template, headers={}, base=base, **KEY)
        assert answer.status == 503, (template, answer.body)
    for probe in ("/healthz", "/readyz"):
        assert (await admin.call("get", probe, headers={}, base=base)).status == 503


async def busy(admin: Admin, store: SQLiteStore) -> None:
    """Every listing turn taken and every waiting place filled: the next listing is 429."""
    held = [listing.turn(store) for _ in range(listing.CONCURRENT_LISTINGS)]
    for hold in held:
        await hold.__aenter__()

    async def wait_turn() -> None:
        async with listing.turn(store):
            pass

    waiters = [asyncio.create_task(wait_turn()) for _ in range(listing.WAITING_LISTINGS)]
    await asyncio.sleep(0)  # each waiter takes its place before blocking (no other await)
    try:
        answer = await admin.call("get", "/admin/events")
        assert answer.status == 429, answer.body
    finally:
        for hold in held:
            await hold.__aexit__(None, None, None)
        await asyncio.gather(*waiters)


async def test_real_answers_match_the_description_and_cover_it(
    tmp_path: Path, client: aiohttp.ClientSession
) -> None:
    outside = non_loopback_address()
    stub = await StubApp().start()
    loop = asyncio.get_running_loop()
    running, store = await serving(tmp_path, "events", config(stub.url),
                                   group=GroupHealth(timeout=3600, heard_at=loop.time(),
                                                     vacant=(2,)))
    admin = Admin(client, f"http://{running.admin_listen}")
    try:
        await seed(store)
        await exercise(admin)
        await busy(admin, store)
    finally:
        await stop(running)
        await store.close()
        await stub.stop()

    open_config = config(stub.url, admin_listen="0.0.0.0:0")
    del open_config["admin_token"]
    running, store = await serving(tmp_path, "trouble", open_config,
                                   group=GroupHealth(timeout=1, heard_at=loop.time() - 60))
    try:
        port = running.admin_listen.port if running.admin_listen else 0
        await trouble(admin, store, f"http://127.0.0.1:{port}", f"http://{outside}:{port}")
    finally:
        await stop(running)

    for answer in admin.answers:
        conforms(answer)
    seen = {(a.method, a.template, str(a.status)) for a in admin.answers}
    every = {(method, path, status) for path, item in SPEC["paths"].items()
             for method, operation in item.items() if method in METHODS
             for status in operation["responses"]}
    assert every - seen == set(), "described answers no test produced"


# == the checks can fail =====================================================================


async def test_a_field_of_another_type_or_not_described_is_refused(
    sqlite_store: SQLiteStore,
) -> None:
    await seed(sqlite_store)
    apps = build_apps(parse_config(config("http://127.0.0.1:9"), env={}), store=sqlite_store)
    async with TestClient(TestServer(apps.admin, host="127.0.0.1")) as client:
        admin = Admin(client.session, str(client.make_url("")).rstrip("/"))
        answer = await admin.call("get", EVENT, provider="queued", event_id="evt_dead_1")
    conforms(answer)
    shown = json.loads(answer.body)
    for changed in ({**shown, "attempt": str(shown["attempt"])},
                    {**shown, "queue": {**shown["queue"], "tries": None}},
                    {**shown, "attempts": [{**shown["attempts"][0], "surprise": 1}]},
                    {**shown, "surprise": 1}):
        with pytest.raises(jsonschema.ValidationError):
            conforms(Answer(answer.method, answer.template, 200, "application/json", {},
                            json.dumps(changed).encode()))
