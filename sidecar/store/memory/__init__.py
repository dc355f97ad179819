"""In-memory store: ``sidecar.core.ports.Store`` in a dict, for tests (ours and yours).

It passes the same contract suite as the PostgreSQL and SQLite adapters
(``tests/integration/test_store_contract.py``), so code tested against it meets the same
answers: one winner per claim, take-overs and results fenced by attempt, leases that expire by
the clock. It keeps nothing across processes or restarts: never a production store.

``tables`` holds its rows and what every verb does first, ``queue`` queue mode's verbs, and
``store`` the :class:`MemoryStore` itself.
"""

from sidecar.store.memory.store import MemoryStore

__all__ = ["MemoryStore"]
