"""Forward mode while the provider is held (paused, or its breaker open): a verified delivery
is answered 503 with ``Retry-After`` and nothing is claimed, so the provider's own retries bring
it back once the hold ends. An event already done is still answered from its row (known here,
or read), as any duplicate: it never reaches the app either way."""

from __future__ import annotations

import math
from typing import assert_never

from sidecar.core.answers import Answer, Result, refuse, replayed
from sidecar.core.batch import batch_answer
from sidecar.core.breaker import Held, HoldReason, ProbeEnd
from sidecar.core.events import EventState
from sidecar.core.known import KnownAnswers
from sidecar.core.ports import RowReader
from sidecar.delivery.context import Delivery


def held_refusal(held: Held) -> Answer:
    match held.reason:
        case HoldReason.PAUSED:
            return refuse("paused")
        case HoldReason.BREAKER_OPEN:
            return refuse("breaker_open", wait=str(math.ceil(held.retry_after)))
        case _:
            assert_never(held.reason)


async def held_answer(delivery: Delivery, held: Held, store: RowReader,
                      known: KnownAnswers) -> Answer:
    """The 503 of ``held``, unless every event of the delivery is done already: then their
    recorded answers, replayed."""
    replays: list[Answer] = []
    for item in delivery.items:
        hit = known.done(delivery.key, item.event_id)
        if hit is not None:
            replays.append(hit.answer)
            continue
        row = await store.get(delivery.key, item.event_id)
        if row is None or row.state is not EventState.DONE:
            return held_refusal(held)
        replays.append(replayed(row.response, row.attempt))
    if not replays:
        return held_refusal(held)
    delivery.trace.fields["held"] = held.reason.value
    return batch_answer(None, replays)


def attempt_end(answer: Answer) -> tuple[ProbeEnd, str]:
    """How a forward-mode delivery's attempt ended for the breaker, from its answer: forwarded
    and well (new, taken over), forwarded and failed (the app's 5xx, 408, 429, or none), or no
    attempt made (a duplicate, in flight elsewhere, refused): ``UNUSED``."""
    if answer.result in (Result.NEW, Result.TAKEOVER):
        return ProbeEnd.SUCCEEDED, ""
    if answer.result is Result.UPSTREAM_ERROR:
        if answer.status >= 500 or answer.status in (408, 429):
            return ProbeEnd.FAILED, (f"HTTP {answer.status}" if answer.reason is None
                                     else str(answer.reason).replace("_", " "))
        return ProbeEnd.SUCCEEDED, ""  # the app answered: it is up
    return ProbeEnd.UNUSED, ""
