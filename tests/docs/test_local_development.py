"""docs/local-development.md: its config (Stripe alone, then with the GitHub block the page adds
under `providers:`) passes `check-config` with the secrets the page exports, and every
forwarding command targets a path the config serves, on the port it listens on. The page's
runnable blocks, run in order, are in test_runnable_blocks."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support import REPO

DOC = REPO / "docs" / "local-development.md"


def test_the_config_checks_and_the_tools_target_its_paths(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    stripe_alone, github_block = re.findall(r"^```yaml\n(.*?)^```$", text, re.M | re.S)
    config_text = stripe_alone + github_block  # the GitHub block goes under `providers:`
    env = {**os.environ,
           "WEBHOOK_SIDECAR_SIGNING_SECRET": "whsec_" + base64.b64encode(os.urandom(32)).decode(),
           "STRIPE_WEBHOOK_SECRET": "whsec_from_stripe_listen"}
    env.pop("GITHUB_WEBHOOK_SECRET", None)
    # Stripe alone needs no GitHub secret; with GitHub added, its secret.
    for config, extra in ((stripe_alone, {}),
                          (config_text, {"GITHUB_WEBHOOK_SECRET": "0123456789abcdef0123"})):
        config_file = tmp_path / "config.local.yaml"
        config_file.write_text(config)
        done = subprocess.run([sys.executable, "-m", "sidecar", "check-config", "--config",
                               str(config_file)], cwd=REPO, env={**env, **extra},
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

    config = yaml.safe_load(config_text)
    port = config["listen"].rsplit(":", 1)[1]
    paths = {p["path"] for p in config["providers"].values()}
    targets = re.findall(r"(?:--forward-to |--url=|--target\s+)(?:http://)?"
                         r"(?:localhost|127\.0\.0\.1):(\d+)(/[\w/-]*)", text)
    assert len(targets) >= 3
    for target_port, path in targets:
        assert target_port == port and path in paths, (target_port, path)
