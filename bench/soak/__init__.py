"""``python -m bench.soak``: days of webhooks, time compressed, against a partitioned and an
unpartitioned PostgreSQL store side by side (issue 23).

A simulated day lasts ``--day-seconds``; the providers' retention (3 days), the partition
interval (1 day), the maintenance interval and autovacuum's naptime are scaled alike. Each store
has its own throwaway cluster (so WAL, CPU and lock-wait logs are each store's alone), its own
proxy process and its own app (``bench.app_fast``, logging every delivery id it receives). One
sender sends the same pattern to both at the same moments: ``--events-per-day`` new events a
day, plus a ``--duplicate-share`` of copies — half of a recent event, half of one from an
earlier simulated day inside retention (a redelivery across partition boundaries). The proxies
run with ``answer_cache: 0`` so every copy is judged by the store.

Per simulated day and store it reports throughput, p99, table + index size, rows, partitions,
WAL bytes, autovacuum runs, lock waits over 100 ms (``log_lock_waits`` with
``deadlock_timeout = 100ms`` on each cluster), CPU per event of the proxy and of PostgreSQL, and
commits per event; then the goals (cost per event flat, storage bounded by retention times daily
volume, no lock wait over 100 ms, nothing lost, nothing forwarded twice) as pass/fail.

Loopback only; bounded in time (``--days`` times ``--day-seconds`` plus a drain); every process
and cluster it starts is stopped and deleted on the way out, Ctrl-C included. Not run in CI;
``tests/integration/test_soak_smoke.py`` runs a tiny one.
"""
