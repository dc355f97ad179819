"""``WEBHOOK_SIDECAR_LOOP`` picks the event loop of every command: ``auto`` (uvloop's when
installed, else asyncio's), ``uvloop``, ``asyncio``. The command says which it runs on (its
``--version``, the ``listening`` line); a value it does not know, or ``uvloop`` without uvloop,
stops it at once with exit 2 and a line that says what to do."""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp
import pytest

from tests.acceptance.conftest import deploy, run_cli
from tests.support import (
    STRIPE_SECRET,
    ProxyProcess,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

uvloop = pytest.importorskip("uvloop")
UVLOOP = f"uvloop {uvloop.__version__}"


def env(value: str | None, *, without_uvloop: Path | None = None) -> dict[str, str]:
    """Our environment with ``WEBHOOK_SIDECAR_LOOP`` set to ``value`` (None: unset);
    ``without_uvloop``: a folder put first on ``PYTHONPATH`` whose ``uvloop`` cannot be
    imported, as where it is not installed."""
    environ = {k: v for k, v in os.environ.items() if k != "WEBHOOK_SIDECAR_LOOP"}
    if value is not None:
        environ["WEBHOOK_SIDECAR_LOOP"] = value
    if without_uvloop is not None:
        without_uvloop.mkdir(exist_ok=True)
        (without_uvloop / "uvloop.py").write_text(
            'raise ModuleNotFoundError("No module named \'uvloop\'", name="uvloop")\n')
        environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(without_uvloop), environ.get("PYTHONPATH")]))
    return environ


@pytest.mark.parametrize(("value", "loop"), [
    (None, UVLOOP), ("", UVLOOP), ("auto", UVLOOP), ("uvloop", UVLOOP), ("UVLoop", UVLOOP),
    ("asyncio", "asyncio"),
])
async def test_the_version_names_the_loop(value: str | None, loop: str) -> None:
    code, out, err = await run_cli("--version", env=env(value))
    assert code == 0, err
    assert out.strip().endswith(f", loop: {loop})"), out


async def test_without_uvloop_auto_is_asyncio_and_uvloop_is_refused(tmp_path: Path) -> None:
    hidden = tmp_path / "no-uvloop"
    code, out, err = await run_cli("--version", env=env("auto", without_uvloop=hidden))
    assert code == 0 and out.strip().endswith(", loop: asyncio)"), (out, err)

    code, out, err = await run_cli("--version", env=env("uvloop", without_uvloop=hidden))
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [
        "webhook-sidecar: WEBHOOK_SIDECAR_LOOP: uvloop is not installed (pip install uvloop), "
        "or set WEBHOOK_SIDECAR_LOOP=asyncio: No module named 'uvloop'"]


@pytest.mark.parametrize("command", [["--version"], ["run", "--config", "absent.yaml"]])
async def test_an_unknown_loop_is_refused_before_anything_else(command: list[str]) -> None:
    code, out, err = await run_cli(*command, env=env("trio"))
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [
        "webhook-sidecar: WEBHOOK_SIDECAR_LOOP: 'trio' is not one of auto, uvloop, asyncio"]


@pytest.mark.parametrize(("value", "loop"), [("asyncio", "asyncio"), ("uvloop", UVLOOP)])
@pytest.mark.parametrize("workers", [1, 2])
async def test_the_proxy_runs_on_the_loop_named(tmp_path: Path, value: str, loop: str,
                                               workers: int) -> None:
    """The ``listening`` line names the loop; a delivery is forwarded, its duplicate
    answered from the store; SIGTERM stops it cleanly (a group's workers inherit the
    choice)."""
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["workers"] = workers
        proc = ProxyProcess(write_config(tmp_path, dep.config),
                            env={"WEBHOOK_SIDECAR_LOOP": value})
        dep.procs = [await proc.start()]
        listening = next(e for e in proc.logs if e.get("event") == "listening")
        assert listening["loop"] == loop
        body = stripe_event("evt_on_the_loop")
        async with aiohttp.ClientSession() as client:
            for _ in range(2):
                status, _, _ = await post(client, proc.url + "/webhooks/stripe", body,
                                       stripe_headers(body, STRIPE_SECRET))
                assert status == 200
        assert dep.stub.count() == 1
        assert await proc.terminate() == 0
        assert not [e for e in proc.logs if e.get("level") in ("error", "critical")], \
            proc.raw_logs
