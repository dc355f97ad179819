"""The events inspector: server-rendered pages under ``/ui/`` on the admin listener (events,
one event with its attempts, an overview) and the operator's actions on them, as an aiohttp
sub-application the admin app mounts at ``PREFIX`` (docs/design.md, "The events inspector")."""

from sidecar.http.ui.app import build_inspector
from sidecar.http.ui.paths import PREFIX

__all__ = ["PREFIX", "build_inspector"]
