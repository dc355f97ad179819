"""The example app chart with its webhook-sidecar dependency built (file://, offline), once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart_support import build_example


@pytest.fixture(scope="session")
def example_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_example(tmp_path_factory.mktemp("helm"))
