"""``check-config`` on the delivery limits, as an operator runs it (a subprocess): a malformed
rate, a burst without a rate, and a concurrency on a forward-mode provider are problems with
their file:line and key path; a queue-mode provider's limits are accepted."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.test_check_config_cli import EXIT_CONFIG, check_config

BROKEN = """\
upstream:
  url: http://127.0.0.1:3000
providers:
  stripe:
    path: /webhooks/stripe
    preset: stripe
    secrets: [whsec_inline_secret_value]
    delivery:
      rate: 20 per second
  shopify:
    path: /webhooks/shopify
    preset: shopify
    secrets: [shpss_secret]
    delivery:
      burst: 10
  github:
    path: /webhooks/github
    preset: github
    secrets: [gh_secret]
    delivery:
      rate: 5/s
      concurrency: 4
"""

GOOD = """\
upstream:
  url: http://127.0.0.1:3000
providers:
  stripe:
    path: /webhooks/stripe
    preset: stripe
    secrets: [whsec_inline_secret_value]
    mode: queue
    delivery: {rate: 600/m, burst: 20, concurrency: 4}
  github:
    path: /webhooks/github
    preset: github
    secrets: [gh_secret]
    delivery: {rate: 5/s}
"""


def test_limit_keys_that_cannot_apply_are_problems_with_file_line_and_key(
        tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(BROKEN)
    result = check_config(path)
    assert result.returncode == EXIT_CONFIG, result.stderr
    lines = result.stderr.splitlines()
    assert [line.split(": ", 2)[:2] for line in lines[:-1]] == [
        [f"{path}:9:7", "providers.stripe.delivery.rate"],
        [f"{path}:15:7", "providers.shopify.delivery.burst"],
        [f"{path}:22:7", "providers.github.delivery.concurrency"],
    ]
    assert "must be a rate such as 20/s" in lines[0] and "'20 per second'" in lines[0]
    assert "applies to delivery.rate, which is not set" in lines[1]
    assert "applies to queue mode" in lines[2]
    assert lines[-1] == f"3 problems in {path}"


def test_limits_that_apply_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    result = check_config(path)
    assert result.returncode == 0, result.stderr
