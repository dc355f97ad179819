"""The events inspector: server-rendered pages under ``/ui/`` on the admin listener (events,
one event with its attempts, an overview) and the operator's actions on them."""

from sidecar.http.ui.views import install

__all__ = ["install"]
