"""What a delivery's store work costs on a three-node Galera cluster against one MariaDB server,
in one run: the claim and the result write of new events through ``MySQLStore``.

    .venv/bin/python -m bench.galera [--deliveries 300] [--concurrent 1500] [--runs 3]

Starts a throwaway ``mariadbd`` and a throwaway three-node cluster (tests/mariadbserver.py,
tests/galeraserver.py: same binaries, same settings but wsrep; neither waits for the disk at
commit), a fresh migrated database on each. Per run:

- ``lone``: ``--deliveries`` deliveries one at a time (a claim, then its result write) through
  one connection to one server / one node: the median milliseconds per delivery;
- ``spread``: ``--concurrent`` deliveries, 48 in flight, from three stores (one per node on
  Galera; three on the one server): deliveries per second.

Prints each run and the medians over runs, and Galera's ratio to the one server (a same-run
ratio: the machine's other load touches both alike).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time

from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.store.mysql import MySQLStore, migrate_mysql
from tests.galeraserver import Cluster
from tests.mariadbserver import ThrowawayServer, create_database

RESULT = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b"ok"), 1.0)
IN_FLIGHT = 48


async def deliver(store: MySQLStore, event_id: str) -> None:
    claim = await store.claim("stripe", event_id, b"h" * 32, 30.0, "bench")
    assert claim.won
    assert await store.complete("stripe", event_id, 1, RESULT)


async def lone(store: MySQLStore, count: int) -> float:
    """Median ms per delivery, one at a time."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await deliver(store, f"evt_{secrets.token_hex(8)}")
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def spread(stores: list[MySQLStore], count: int) -> float:
    """Deliveries per second, IN_FLIGHT at a time over ``stores`` in turn."""
    ids = iter(range(count))
    prefix = secrets.token_hex(4)

    async def worker(n: int) -> None:
        for i in ids:
            await deliver(stores[(n + i) % len(stores)], f"evt_{prefix}_{i}")

    started = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in range(IN_FLIGHT)))
    return count / (time.perf_counter() - started)


async def target(dsns: list[str]) -> list[MySQLStore]:
    name = f"bench_{secrets.token_hex(4)}"
    urls = [await create_database(dsns[0], name)]
    urls += [dsn + name for dsn in dsns[1:]]
    await migrate_mysql(urls[0])
    return [await MySQLStore.connect(url, max_size=IN_FLIGHT // len(urls) + 2) for url in urls]


async def measure(args: argparse.Namespace, one: str, nodes: list[str]) -> None:
    results: dict[str, dict[str, list[float]]] = {"one server": {}, "galera": {}}
    for run in range(1, args.runs + 1):
        for label, dsns in (("one server", [one, one, one]), ("galera", nodes)):
            stores = await target(dsns)
            try:
                ms = await lone(stores[0], args.deliveries)
                rate = await spread(stores, args.concurrent)
            finally:
                for store in stores:
                    await store.close()
            results[label].setdefault("lone", []).append(ms)
            results[label].setdefault("spread", []).append(rate)
            print(f"run {run} {label:>10}: lone {ms:6.2f} ms/delivery, "
                  f"spread {rate:7.0f} deliveries/s", flush=True)
    medians = {label: {k: statistics.median(v) for k, v in r.items()}
               for label, r in results.items()}
    for label, m in medians.items():
        print(f"median {label:>10}: lone {m['lone']:6.2f} ms/delivery, "
              f"spread {m['spread']:7.0f} deliveries/s")
    galera, one = medians["galera"], medians["one server"]
    print(f"galera / one server: lone {galera['lone'] / one['lone']:.2f}x the time, "
          f"spread {galera['spread'] / one['spread']:.2f}x the rate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server, cluster = ThrowawayServer(), Cluster()
    try:
        server.start()
        cluster.start()
        asyncio.run(measure(args, server.dsn, [n.dsn for n in cluster.nodes]))
    finally:
        cluster.cleanup()
        server.cleanup()


if __name__ == "__main__":
    main()
