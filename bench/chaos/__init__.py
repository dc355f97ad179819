"""Chaos suite: two proxy replicas share a private database (a PostgreSQL cluster, or with
``--store mariadb`` a mariadbd) while a fault is injected
under light load, and a simulated provider redelivers anything not answered 2xx. After
quiescence the whole history is checked against the invariants in ``bench.chaos.invariants``; a
violated invariant makes the command exit 1 and names itself.

    .venv/bin/python -m bench.chaos [--store postgres|mariadb] [--scenario NAME]... [--runs N]
                                    [--break NAME] [--write-docs] [--seconds S] [--rate R]

Scenarios (each on its own throwaway server, started on a free port: initdb/pg_ctl, or
mariadb-install-db/mariadbd; on MariaDB the database faults are SIGSTOP/SIGKILL of mariadbd,
KILL CONNECTION and SELECT … FOR UPDATE):
db-hang, backend-kills, db-crash, row-locks, upstream-faults, gzip-flood, and for a queue-mode
provider queue-kill-accept, queue-kill-forward and queue-kill-permits (replicas SIGKILLed and
restarted; the last while they hold delivery.concurrency permits), breaker-cycles (the app
answering 500 while the provider's circuit breaker cycles) and fanout-kill (a provider fanning
out to three apps, one of them down for a while, replicas SIGKILLed; the invariants checked
per destination). Loopback only,
bounded: each run sends for --seconds, every event is given up --give-up seconds after its
first delivery, and the clusters, proxies and fault proxy are torn down in ``finally`` blocks.
See docs/chaos.md for the method, the invariants and the latest results.
"""
