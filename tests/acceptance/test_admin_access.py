"""The admin API (list, release, re-drive) is served to loopback only unless admin_token is
set: in a pod the admin port listens on the pod IP for probes and Prometheus, and release or
re-drive must not be open to the whole cluster (nor to a proxy in front, nor to a website
rebinding its name to this host). A real proxy process with its admin listener on
0.0.0.0, reached once over loopback and once over this host's own non-loopback address."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import aiohttp
import pytest

from tests.acceptance.conftest import deploy, run_cli
from tests.support import write_config


def non_loopback_address() -> str:
    """An IPv4 address of this host that is not loopback (the source a UDP socket would use
    towards a documentation address; nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            address = "127.0.0.1"
    if address.startswith("127."):
        reason = "this host has no non-loopback IPv4 address to reach the admin port from"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    return address


async def statuses(client: aiohttp.ClientSession, port: int, host: str,
                   headers: dict[str, str] | None = None) -> dict[str, int]:
    found = {}
    for path in ("/healthz", "/metrics", "/admin/events"):
        async with client.get(f"http://{host}:{port}{path}", headers=headers) as resp:
            found[path] = resp.status
    return found


async def test_without_a_token_admin_answers_only_loopback(tmp_path: Path) -> None:
    outside = non_loopback_address()
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["admin_listen"] = "0.0.0.0:0"
        await dep.start(1)
        assert dep.client is not None
        port = int(dep.procs[0].admin.rsplit(":", 1)[1])
        assert await statuses(dep.client, port, "127.0.0.1") == {
            "/healthz": 200, "/metrics": 200, "/admin/events": 200}
        assert await statuses(dep.client, port, outside) == {
            "/healthz": 200, "/metrics": 200, "/admin/events": 403}
        async with dep.client.post(f"http://{outside}:{port}/admin/events/stripe/x/redrive") as r:
            assert r.status == 403 and (await r.json())["reason"] == "admin_token_required"
        refused = await dep.procs[0].wait_for_log("admin_refused")
        assert refused["reason"] == "admin_token_required"

        # From loopback, but through a proxy on this host, or by a name that is not this
        # listener's (DNS rebinding from an operator's browser): refused too; probes are not.
        proxied = {"X-Forwarded-For": "203.0.113.9"}
        assert await statuses(dep.client, port, "127.0.0.1", proxied) == {
            "/healthz": 200, "/metrics": 200, "/admin/events": 403}
        rebound = {"Host": f"attacker.example:{port}"}
        assert await statuses(dep.client, port, "127.0.0.1", rebound) == {
            "/healthz": 200, "/metrics": 200, "/admin/events": 403}
        async with dep.client.get(f"http://127.0.0.1:{port}/admin/events",
                                  headers=rebound) as r:
            assert (await r.json())["reason"] == "host_not_allowed"
        async with dep.client.get(f"http://127.0.0.1:{port}/admin/events",
                                  headers={"Host": f"localhost:{port}"}) as r:
            assert r.status == 200

        # check-config says so up front.
        code, out, _ = await run_cli("check-config", "--config",
                                     str(write_config(dep.tmp, dep.config)))
        assert code == 0 and "answers only requests from loopback" in out


async def test_with_a_token_admin_answers_anywhere_that_presents_it(tmp_path: Path) -> None:
    outside = non_loopback_address()
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["admin_listen"] = "0.0.0.0:0"
        dep.config["admin_token"] = "a" * 32
        await dep.start(1)
        assert dep.client is not None
        port = int(dep.procs[0].admin.rsplit(":", 1)[1])
        bearer = {"Authorization": "Bearer " + "a" * 32}
        assert (await statuses(dep.client, port, outside, bearer))["/admin/events"] == 200
        assert (await statuses(dep.client, port, outside))["/admin/events"] == 401
        assert (await statuses(dep.client, port, "127.0.0.1"))["/admin/events"] == 401


async def test_the_bearer_scheme_in_any_case_and_the_bare_token_are_accepted(
        tmp_path: Path) -> None:
    """RFC 9110 §11.1: an auth scheme is case-insensitive, and one or more spaces separate it
    from the token. The bare token (no scheme), which earlier releases accepted, still works
    and logs a deprecation warning. Anything else is 401 with a Bearer challenge."""
    token = "s3cr3t-admin-" + "t" * 20
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["admin_token"] = token
        await dep.start(1)
        client, proc = dep.client, dep.procs[0]
        assert client is not None

        async def status(authorization: str | None) -> tuple[int, str | None]:
            headers = {} if authorization is None else {"Authorization": authorization}
            async with client.get(proc.admin_url + "/admin/events", headers=headers) as resp:
                return resp.status, resp.headers.get("WWW-Authenticate")

        for accepted in (f"Bearer {token}", f"bearer {token}", f"BEARER {token}",
                         f"bEaReR {token}", f"Bearer   {token}"):
            assert await status(accepted) == (200, None), accepted
        assert not [e for e in proc.logs if e.get("event") == "admin_token_without_scheme"]

        assert await status(token) == (200, None)
        deprecated = await proc.wait_for_log("admin_token_without_scheme")
        assert deprecated["level"] == "warning" and token not in str(deprecated)

        for refused in (None, "", "Bearer", f"Basic {token}", f"Bearer {token}x",
                        f"Bearer{token}", f"Bearer x{token}", "bearer " + "u" * len(token)):
            assert await status(refused) == (401, 'Bearer realm="webhook-sidecar admin"'), (
                refused)
