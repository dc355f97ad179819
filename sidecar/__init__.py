"""webhook-sidecar: a verifying, deduplicating reverse proxy for inbound webhooks."""

__version__ = "0.1.0"
