"""The headers the proxy itself sets: on forwards to the app, and on answers to providers.
A sender's copies of any of them are dropped before forwarding (see ``forwardable_headers``)."""

from __future__ import annotations

from typing import Final

OWN_PREFIX: Final = "x-webhook-sidecar-"  # headers only the proxy sets

# on every forward to the app
PROVIDER_HEADER: Final = "X-Webhook-Sidecar-Provider"
ATTEMPT_HEADER: Final = "X-Webhook-Sidecar-Attempt"  # also on answers relayed or replayed
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
EVENT_HEADER: Final = "X-Webhook-Sidecar-Event-Id"  # single events
BATCH_SIZE_HEADER: Final = "X-Webhook-Sidecar-Batch-Size"  # batch forwards

# on answers to providers
REPLAY_HEADER: Final = "X-Webhook-Sidecar-Replay"  # "true": answered from the recorded row
QUEUED_HEADER: Final = "X-Webhook-Sidecar-Queued"  # "true": accepted in queue mode
