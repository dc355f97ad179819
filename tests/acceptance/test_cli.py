"""The command line as a user runs it: a subprocess, its exit code and its output."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import aiohttp

from sidecar import __version__
from sidecar.runtime import loop as event_loop
from tests.acceptance.conftest import Deployment, deploy, run_cli
from tests.deploy.chart_support import CHART, notes, values_of
from tests.support import (
    GITHUB_SECRET,
    REPO,
    STRIPE_SECRET,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)


async def test_python_dash_m_is_the_command() -> None:
    code, out, _ = await run_cli("--version")
    # The build the suite runs on: pure Python unless the run says it compiled the package
    # (WEBHOOK_SIDECAR_COMPILE, as scripts/compile does), then mypyc's modules.
    compiling = os.environ.get("WEBHOOK_SIDECAR_COMPILE", "").strip() not in ("", "0")
    expected = "true" if compiling else "false"
    loop = event_loop.choose()  # the suite's WEBHOOK_SIDECAR_LOOP, which the command inherits
    assert code == 0 and out.strip() \
        == f"webhook-sidecar {__version__} (compiled: {expected}, loop: {loop})"


async def test_check_config_accepts_a_valid_file_and_names_bad_keys(tmp_path: Path) -> None:
    config = base_config("http://127.0.0.1:3000", "sqlite:///events.db")
    code, out, err = await run_cli("check-config", "--config", str(write_config(tmp_path, config)))
    assert code == 0, err
    assert "stripe: POST /webhooks/stripe" in out

    config["providers"]["stripe"]["lease"] = "1s"
    code, _, err = await run_cli("check-config", "--config", str(write_config(tmp_path, config)))
    assert code == 2
    assert "providers.stripe.lease" in err

    code, _, err = await run_cli("check-config", "--config", str(tmp_path / "absent.yaml"))
    assert code == 2 and "cannot read config file" in err


async def test_check_config_warns_when_retention_is_shorter_than_the_retry_window(
    tmp_path: Path,
) -> None:
    config = base_config("http://127.0.0.1:3000", "sqlite:///events.db")
    code, out, _ = await run_cli("check-config", "--config", str(write_config(tmp_path, config)))
    assert code == 0 and "retry window" not in out
    config["providers"]["stripe"]["retention"] = "1d"  # Stripe retries for 3 days
    code, out, _ = await run_cli("check-config", "--config", str(write_config(tmp_path, config)))
    assert code == 0
    assert "warning: providers.stripe.retention (1d) is shorter than the provider's retry " \
           "window (3d)" in out


async def test_demo_exits_zero() -> None:
    code, out, err = await run_cli("demo")
    assert code == 0, out + err
    assert "demo OK" in out


async def test_sigterm_lets_inflight_forwards_finish_and_record(deployment: Deployment) -> None:
    await deployment.start(1)
    assert deployment.client is not None
    deployment.stub.hold.clear()
    proc = deployment.procs[0]
    bodies = [stripe_event(f"evt_drain_{i:02d}") for i in range(20)]
    inflight = [asyncio.create_task(post(deployment.client, proc.url + "/webhooks/stripe", body,
                                         stripe_headers(body))) for body in bodies]
    await deployment.stub.wait_for(lambda: deployment.stub.count() == 20)
    assert proc.proc is not None
    proc.proc.terminate()  # SIGTERM while all twenty are inside the app
    await proc.wait_for_log("shutting_down")
    deployment.stub.hold.set()
    results = await asyncio.gather(*inflight)
    assert [status for status, _, _ in results] == [200] * 20
    assert await proc.wait() == 0
    rows = await deployment.rows.all()
    assert sorted((r["event_id"], r["state"]) for r in rows) == [
        (f"evt_drain_{i:02d}", "done") for i in range(20)]
    deployment.procs = []


async def test_sigterm_past_the_timeout_marks_nothing_done(deployment: Deployment) -> None:
    deployment.config["shutdown_timeout"] = "500ms"
    deployment.config["upstream"]["timeout"] = "30s"
    for provider in deployment.config["providers"].values():
        provider["lease"] = "60s"
    await deployment.start(1)
    assert deployment.client is not None
    deployment.stub.hold.clear()  # the app never answers while we shut down
    proc = deployment.procs[0]
    body = stripe_event("evt_cut_off")
    inflight = asyncio.create_task(post(deployment.client, proc.url + "/webhooks/stripe", body,
                                        stripe_headers(body)))
    await deployment.stub.wait_for(lambda: deployment.stub.count() == 1)
    assert proc.proc is not None
    proc.proc.terminate()
    assert await proc.wait() == 0
    deployment.procs = []
    with contextlib.suppress(aiohttp.ClientError):
        status, _, _ = await inflight
        assert status >= 500  # whatever the provider got, it was not a 2xx
    row = await deployment.rows.one("stripe", "evt_cut_off")
    assert row is not None and row["state"] == "processing"  # retried after the lease expires
    deployment.stub.hold.set()


async def test_send_names_the_event_it_delivered(deployment: Deployment) -> None:
    await deployment.start(1)
    payload = deployment.tmp / "event.json"
    payload.write_bytes(stripe_event("evt_sent"))
    url = deployment.url(0, "/webhooks/stripe")
    code, out, err = await run_cli("send", "--preset", "stripe", "--secret", STRIPE_SECRET,
                                   "--url", url, "--file", str(payload), "--count", "2")
    assert code == 0, out + err
    assert out.splitlines()[0] == "event id: evt_sent, in each of 2 copies"
    assert [line.split()[-1] for line in out.splitlines() if line.startswith("#")] == [
        "event=evt_sent"] * 2
    assert "1 replays" in out
    assert deployment.stub.count("evt_sent") == 1

    code, out, err = await run_cli("send", "--preset", "stripe", "--secret", STRIPE_SECRET,
                                   "--url", url, "--file", str(payload), "--quiet")
    assert (code, out, err) == (0, "evt_sent\n", "")


async def test_a_refused_send_prints_the_proxys_reason(tmp_path: Path) -> None:
    """GitHub: the copies of one run are one delivery (the second is answered from the row);
    another run sends the same body under a new X-GitHub-Delivery, which the proxy refuses as
    a replayed body — and send says why, as it does for a wrong secret (--quiet: on stderr)."""
    async with deploy("sqlite", tmp_path, None) as dep:
        await dep.start(1)
        payload = tmp_path / "event.json"
        payload.write_text('{"zen": "Keep it logically awesome.", "hook_id": 1}')
        send = ("send", "--preset", "github", "--url", dep.url(0, "/webhooks/github"),
                "--file", str(payload))
        code, out, err = await run_cli(*send, "--secret", GITHUB_SECRET, "--count", "2")
        assert code == 0, out + err
        assert [line.split()[:3] for line in out.splitlines() if line.startswith("#")] == [
            ["#1", "status=200", "replay=-"], ["#2", "status=200", "replay=true"]]

        code, out, err = await run_cli(*send, "--secret", GITHUB_SECRET)
        assert code == 1, out + err
        [line] = [line for line in out.splitlines() if line.startswith("#")]
        assert line.startswith("#1 status=401 ")
        assert line.endswith(" reason=replayed_body: this signed body was already delivered "
                             "under another event id (a replay); see on_body_replay"), line

        code, out, err = await run_cli(*send, "--secret", "not the secret", "--quiet")
        assert code == 1 and out.count("\n") == 1, out + err  # the event id, and only it
        assert err.startswith("#1 status=401 ") and "reason=bad_signature: signature " \
            "verification failed" in err, err
        assert dep.stub.count() == 1


async def test_the_install_notes_send_commands_show_a_duplicate(tmp_path: Path) -> None:
    """The chart's NOTES, for a first provider of each kind (event id in a header GitHub does
    not sign, at $.id, at $.event_id): the send commands they print, run as printed against a
    real proxy, show the second copy answered from the store while the app sees one request."""
    secrets = {"github": GITHUB_SECRET, "stripe": STRIPE_SECRET,
               "slack": "8f742231b10e8888abcd99yyyzzz85a5"}
    async with deploy("sqlite", tmp_path, None) as dep:
        await dep.start(1)
        config = str(write_config(tmp_path, dep.config))
        for run, (preset, secret) in enumerate(secrets.items()):
            text = notes(CHART, values_of("standalone", providers={preset: {
                "path": f"/webhooks/{preset}", "preset": preset,
                "secrets": [{"secretKeyRef": {"name": preset, "key": "secret"}}]}}))
            payload, from_machine, from_pod = notes_commands(text)
            for where, command in enumerate((from_machine, from_pod)):
                event = tmp_path / f"event-{run}-{where}.json"  # each run a new event
                event.write_text(payload.replace("evt_chart_check_1", f"evt_{preset}_{where}"))
                args = [arg.replace("<its signing secret>", secret)
                        .replace("/etc/webhook-sidecar/config/config.yaml", config)
                        .replace("http://127.0.0.1:8080", dep.procs[0].url)
                        .replace("event.json", str(event)) for arg in command]
                code, out, err = await run_cli(*args[1:])
                assert code == 0, (preset, out, err)
                assert [line.split()[:3] for line in out.splitlines() if line.startswith("#")] \
                    == [["#1", "status=200", "replay=-"], ["#2", "status=200", "replay=true"]], (
                        preset, out)
                assert "1 replays" in out
        assert len(dep.stub.seen) == 2 * len(secrets)  # each event reached the app once


def notes_commands(text: str) -> tuple[str, list[str], list[str]]:
    """From the NOTES' "Verify the first delivery": the payload written to event.json, and the
    two send commands (from your machine; from the pod, its stdin event.json)."""
    section = text.split("Verify the first delivery", 1)[1].replace("\\\n", " ")
    payload = re.search(r"echo '(.*)' > event.json", section)
    assert payload is not None, section
    sends = [shlex.split(line[line.index("webhook-sidecar send"):].replace("< event.json", ""))
             for line in section.splitlines() if "webhook-sidecar send" in line]
    assert len(sends) == 2, section
    return payload.group(1), sends[0], [*sends[1][:-1], "event.json"]


async def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``events list --json | head`` once ``head`` has gone: every command that prints stops
    without a traceback, exiting 141 as a process killed by SIGPIPE does."""
    async with deploy("sqlite", tmp_path, None) as dep:
        await dep.start(1)
        assert dep.client is not None
        body = stripe_event("evt_piped")
        assert (await post(dep.client, dep.url(0, "/webhooks/stripe"), body,
                           stripe_headers(body)))[0] == 200
        await dep.stop()
        config = str(write_config(tmp_path, dep.config))
        payload = tmp_path / "event.json"
        payload.write_bytes(body)
        # Output printed at once (send), and buffered until the command ends (the others).
        commands = [
            ("events", "list", "--config", config, "--json"),
            ("events", "show", "stripe", "evt_piped", "--config", config),
            ("check-config", "--config", config),
            ("send", "--preset", "stripe", "--secret", STRIPE_SECRET, "--file", str(payload),
             "--url", "http://127.0.0.1:9/webhooks/stripe", "--timeout", "1"),
        ]
        for command in commands:
            code, err = await asyncio.to_thread(run_into_closed_pipe, *command)
            assert (code, err) == (141, ""), command


def run_into_closed_pipe(*args: str) -> tuple[int, str]:
    """The CLI with its stdout a pipe nobody reads any more: its exit code and stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "sidecar", *args], cwd=REPO, stdout=write,
                              stderr=subprocess.PIPE, timeout=60, check=False)
    finally:
        os.close(write)
    return done.returncode, done.stderr.decode()


async def test_samples_sent_through_the_proxy_arrive_with_their_event_id_and_type(
    tmp_path: Path,
) -> None:
    """``send --sample``: the proxy verifies each sample and forwards it under the event id
    send printed (Stripe and Slack: from the sample's body; GitHub: the X-GitHub-Delivery send
    made up), and the app sees the sample's X-GitHub-Event, not the file default ``ping``."""
    async with deploy("sqlite", tmp_path, None) as dep:
        await dep.start(1)
        cases = [("stripe", STRIPE_SECRET, "invoice.paid", "evt_1PJm7tLkdIwHu7ixw3gNqB5d"),
                 ("slack", "8f742231b10e8888abcd99yyyzzz85a5", "app_mention", "Ev123ABC456"),
                 ("github", GITHUB_SECRET, "pull_request", None)]
        for preset, secret, sample, expected in cases:
            code, out, err = await run_cli(
                "send", "--preset", preset, "--secret", secret, "--sample", sample,
                "--url", dep.url(0, f"/webhooks/{preset}"), "--quiet")
            assert (code, err) == (0, ""), out + err
            [event_id] = out.split()
            assert expected in (None, event_id)
            [seen] = [s for s in dep.stub.seen if s.event_id == event_id]
            if preset == "github":
                assert seen.headers["X-GitHub-Event"] == "pull_request"
                assert b'"action": "opened"' in seen.body
        assert dep.stub.count() == 3
