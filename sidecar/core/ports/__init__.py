"""The store port: the few verbs the proxy needs, implemented once per database.

Each caller is typed by the role it plays, and sees only that role's verbs:

    RowReader         get                                       whether a lost write landed
    EventStore        + take_over, complete                     the forwarder's result write
    DeliveryStore     + claim, claim_guarded, enqueue,          the delivery pipeline
                        bind_nonce
    OperatorStore     + list_page, attempts, release, …         the events CLI and admin API
    QueueWorkerStore  get, take_queued, settle_queued, …        queue mode's delivery workers
    LimitStore        take_tokens, take_permits, …              delivery.rate / concurrency
    UpkeepStore       purge, purge_nonces, stuck_counts, …      maintenance, probes, gauges
    ProviderStateStore  provider_states, pause_provider, …      holds: pause and the breaker
    AdminStore        OperatorStore + UpkeepStore               the admin API (verbs, readiness)
    NoticeStore       claim_notice                              notifications, once per interval
    Store             all of them, and close                    the adapters, the composition
                                                                root and the contract suites
"""

from __future__ import annotations

from typing import Protocol

from sidecar.core.ports.delivery import (
    DeliveryStore,
    EventStore,
    LimitStore,
    QueueWorkerStore,
    RowReader,
)
from sidecar.core.ports.operator import (
    AdminStore,
    NoticeStore,
    OperatorStore,
    PartitionUpkeep,
    ProviderStateStore,
    UpkeepStore,
)

__all__ = [
    "AdminStore", "DeliveryStore", "EventStore", "LimitStore", "NoticeStore", "OperatorStore",
    "PartitionUpkeep", "ProviderStateStore", "QueueWorkerStore", "RowReader", "Store",
    "UpkeepStore",
]


class Store(DeliveryStore, QueueWorkerStore, AdminStore, ProviderStateStore, NoticeStore,
            Protocol):
    """Storage of event rows. Every method raises ``StoreError`` (never a driver error) when the
    database is unreachable or too slow.

    Invariants the adapters enforce in the database itself:
    - ``claim`` is atomic across processes: of N concurrent claims of one key exactly one wins.
    - ``take_over`` succeeds for exactly one caller per eligible row state.
    - ``complete`` is fenced by ``attempt``: a stale attempt never overwrites a newer one.

    Implementations live in ``sidecar.store`` (PostgreSQL, SQLite, and ``MemoryStore`` for
    tests); ``tests/integration/test_store_contract.py`` holds every one of them to this
    contract.
    """

    async def close(self) -> None: ...
