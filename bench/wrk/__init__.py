"""Speed of webhook-sidecar against its floors and a Node + Redis competitor, driven by wrk.

    .venv/bin/python -m bench.wrk [--store postgres|mariadb|sqlite[,…]] [--duration 10] [--runs 1]
                                  [--phases passthrough,hello,…] [--seed-rows N] [--write-docs]

Every phase sends pre-signed GitHub deliveries (bench/wrk/deliveries.lua) from one wrk thread
over 32 keep-alive connections for a fixed time after a warm-up, on loopback:

  passthrough      a bare aiohttp pass-through proxy (bench/passthrough.py): the Python floor
  hello            an aiohttp "hello world" (bench/hello.py): aiohttp's server alone
  competitor       Node 20 + Redis (bench/competitor): verify, SET NX, forward; new events
  competitor-dups  the same, duplicates of events it delivered first
  dups-known       webhook-sidecar: duplicates of done events this process delivered first
  dups-unknown     webhook-sidecar: duplicates of done events another process delivered first
  new              webhook-sidecar: every request a new event
  burst            webhook-sidecar: 50 copies of each new event at once (50 connections)
  queue            webhook-sidecar, queue mode: every request a new event, answered once
                   stored; the phase ends when the app has received every accepted one

Each webhook-sidecar phase gets a fresh database (PostgreSQL: bench_wrk_<pid> on the server at
$SIDECAR_BENCH_PG_DSN, else 127.0.0.1:5432, created from a migrated template and CHECKPOINTed
before the measurement; MariaDB: bench_wrk, migrated, on a private mariadbd with every commit
fsynced; SQLite: a new file). With several stores (``--store postgres,mariadb``) each
webhook-sidecar phase runs once per store, one after the other in every run (the first store
alternating), and the report adds each store's ratios to the first's. The app behind every
proxy is nginx `return 200` (or bench/app_fast.py when nginx is not installed); it logs each
delivery id it receives, which is how the checks count forwards. Per phase: req/s, p50/p99
latency, the proxy's CPU per request (utime + stime from /proc), the store's CPU per request
(PostgreSQL's processes from /proc, other databases' sessions excluded; mariadbd's) or Redis's
for the competitor, and commits per request (pg_stat_database; MariaDB: the COMMITs sent, and
InnoDB's fsyncs). Bounded in time; stops every process it started, drops its databases. Not
part of the test suite. See docs/benchmarks.md.
"""
