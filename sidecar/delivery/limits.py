"""Forward mode under ``delivery.rate``: a delivery that may reach the app takes one token from
the provider's bucket in the store before its claim. With none left it is answered 429 with
``Retry-After`` (when the next token is due) and nothing is claimed, so the provider's retry is
a first delivery like any other: nothing is lost, nothing forwarded twice. A delivery this
process knows to be a duplicate of a done event takes no token; one the claim then answers from
its row (not forwarded) puts its token back. Why the token comes before the claim:
docs/design.md, "Rate and concurrency limits".
"""

from __future__ import annotations

from sidecar.core.answers import Answer, refuse
from sidecar.core.errors import StoreError
from sidecar.core.known import KnownAnswers
from sidecar.core.limits import Limit, RateLimit, next_token_in, rate_limit, retry_after
from sidecar.core.ports import LimitStore
from sidecar.delivery.context import Delivery
from sidecar.delivery.ports import Observer


class RateLimiter:
    def __init__(self, store: LimitStore, known: KnownAnswers, observer: Observer) -> None:
        self._store = store
        self._known = known
        self._observer = observer

    async def admit(self, delivery: Delivery) -> Answer | RateLimit | None:
        """The 429 answer when the provider's bucket is empty; else the bucket a token was
        taken from (give it back with ``unspent`` if the delivery is not forwarded), or None
        when no token was needed (no rate, or every event known done)."""
        provider = delivery.provider
        limit = rate_limit(provider.delivery.rate, provider.delivery.burst)
        if limit is None or all(self._known.done(delivery.key, item.event_id) is not None
                                for item in delivery.items):
            return None
        took = await self._store.take_tokens(provider.key, 1, limit)
        if took.granted:
            return limit
        wait = retry_after(next_token_in(took.left, limit))
        self._observer.limited(provider.key, Limit.RATE.value)
        delivery.trace.fields["retry_after_s"] = wait
        return refuse("rate_limited", wait=wait, rate=str(provider.delivery.rate))

    async def unspent(self, delivery: Delivery, limit: RateLimit) -> None:
        """Best effort: the token of a delivery answered without a forward, put back."""
        try:
            await self._store.return_tokens(delivery.provider.key, 1, limit)
        except StoreError:
            pass  # a token lost for a moment: the bucket refills
