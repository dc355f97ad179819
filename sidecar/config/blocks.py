"""The model's blocks: the top level's (``TOP``), a provider's (``PROVIDER``), and every block by
the key path its keys are documented with (``BLOCKS``)."""

from __future__ import annotations

from typing import Final

from sidecar.config.declarations import Block, Nested, block_of
from sidecar.config.model import Config, DestinationConfig, NotifyTarget, ProviderConfig

TOP: Final = block_of(Config)
PROVIDER: Final = block_of(ProviderConfig)  # each value under ``providers`` (``read_providers``)
NOTIFY_TARGET: Final = block_of(NotifyTarget)  # each item of ``notify.targets``
DESTINATION: Final = block_of(DestinationConfig)  # each item of a provider's ``destinations``


def _by_path(block: Block, path: str = "") -> dict[str, Block]:
    """``block`` and the blocks nested in it, by key path."""
    found = {path: block}
    for name, key in block.keys.items():
        if isinstance(key.kind, Nested):
            found.update(_by_path(key.kind.block, f"{path}.{name}" if path else name))
    return found


# Each block under the key path its keys are documented with (the reference tables, the chart).
BLOCKS: Final[dict[str, Block]] = {**_by_path(TOP), **_by_path(NOTIFY_TARGET, "notify.targets[]"),
                                   **_by_path(PROVIDER, "providers.<key>"),
                                   **_by_path(DESTINATION, "providers.<key>.destinations[]")}
