"""`webhook-sidecar send` reads its config from `$WEBHOOK_SIDECAR_CONFIG` when `--config` is not
given, as every other subcommand does and as docs/operations.md says (inside the pod the chart
sets the variable, so `send --provider stripe …` signs with the pod's own config). `--preset`
still wins over the variable."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import stripe

from tests.support import REPO, STRIPE_SECRET, StubApp, base_config, stripe_event, write_config


async def _send(*args: str, config: Path) -> tuple[int, str]:
    env = {**os.environ, "WEBHOOK_SIDECAR_CONFIG": str(config)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar", "send", *args, cwd=str(REPO), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_send_signs_with_the_config_the_variable_names(tmp_path: Path) -> None:
    app = await StubApp().start()
    try:
        config = write_config(tmp_path, base_config(app.url, "sqlite:///events.db"))
        payload = tmp_path / "event.json"
        payload.write_bytes(stripe_event("evt_from_env_config"))
        code, out = await _send("--provider", "stripe", "--url", f"{app.url}/webhooks/stripe",
                                "--file", str(payload), config=config)
        assert code == 0, out
        [seen] = app.seen
        # The provider's own SDK accepts the signature: it was made with the config's secret.
        event = stripe.Webhook.construct_event(seen.body, seen.headers["Stripe-Signature"],
                                               STRIPE_SECRET)
        assert event["id"] == "evt_from_env_config"

        code, out = await _send("--preset", "stripe", "--secret", "whsec_other", "--url",
                                f"{app.url}/webhooks/stripe", "--file", str(payload),
                                config=config)
        assert code == 0, out
        assert len(app.seen) == 2
    finally:
        await app.stop()
