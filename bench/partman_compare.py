"""Our partition manager against pg_partman on the store's partitioned tables, in a throwaway
cluster (pg_partman's background worker set for one database there). Run: ``python -m
bench.partman_compare`` (needs Debian's ``postgresql-15-partman`` and ``pgbouncer``).

Both get the schema of ``migrate`` + ``store.partitioning`` (partitions of a minute, two ahead,
our uniqueness trigger); pg_partman through ``create_parent`` (native, ``p_premake``) and
``part_config``. Cases: (a) catch-up from the DEFAULT partition under ~100 claims/s, (b)
retention of a partition holding a live lease, without and with a pre-drop check, (c) behind
pgbouncer in transaction mode. Findings: docs/design.md, "Our partition manager and pg_partman".
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.postgres.partition_upkeep import PartitionKeeper
from sidecar.store.postgres.partitioning import TABLES, partition_store
from tests.pgserver import (
    ThrowawayCluster,
    _as_postgres_user,
    create_database,
    drop_database,
    free_port,
)

STEP = 60  # seconds: the partition interval
AHEAD = 2
RATE = 100.0  # claims per second, while behind and while catching up
FLOWS = 4
BEHIND = float(os.environ.get("PARTMAN_COMPARE_BEHIND", "15"))  # seconds without maintenance
AFTER = 8.0  # seconds of claims after maintenance began
BGW_DB = "cmp_bgw"  # the one database pg_partman's background worker maintains
BODY = bytes(32)

Result = dict[str, Any]

# A pre-drop check for pg_partman: refuse every DROP TABLE while an event partition retention is
# due to drop (or a detached one) holds work; an event trigger is not told a DROP's target.
KEEP_BUSY = r"""
CREATE FUNCTION cmp_keep_busy() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel FROM pg_class c
              WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace
                AND c.relname LIKE 'webhook\_event\_p%' AND NOT c.relispartition
             UNION ALL
             SELECT part FROM webhook_partitions('webhook_event')
              WHERE NOT is_default AND upper_bound < now() - (
                    SELECT retention::interval FROM partman.part_config
                     WHERE parent_table = 'public.webhook_event') LOOP
        IF webhook_partition_busy(r.rel) THEN
            RAISE EXCEPTION 'partition % holds work', r.rel USING ERRCODE = 'object_in_use';
        END IF;
    END LOOP;
END $$;
CREATE EVENT TRIGGER cmp_keep_busy ON ddl_command_start WHEN TAG IN ('DROP TABLE')
    EXECUTE FUNCTION cmp_keep_busy();
"""


# -- setting up ------------------------------------------------------------------------------

@asynccontextmanager
async def connected(url: str, **options: Any) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(url, **options)
    try:
        yield conn
    finally:
        await conn.close()


async def ours(admin: str, name: str) -> str:
    url = await create_database(admin, name)
    await migrate_postgres(url)
    assert await partition_store(url, interval=STEP, ahead=AHEAD, only_if_empty=True)
    return url


async def partman(admin: str, name: str) -> str:
    """The store's partitioned schema with its (empty) partitions handed to pg_partman: from
    twelve intervals back, ``AHEAD`` ahead, its own DEFAULT partitions."""
    url = await ours(admin, name)
    async with connected(url) as conn:
        await conn.execute("CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman")
        start = await conn.fetchval("SELECT (now() - interval '12 minutes')::text")
        for table, column, _ in TABLES:
            for (part,) in await conn.fetch(
                    "SELECT part::text FROM webhook_partitions($1::regclass)", table):
                await conn.execute(f"ALTER TABLE {table} DETACH PARTITION {part}; "
                                   f"DROP TABLE {part}")
            await conn.fetchval(
                "SELECT partman.create_parent($1, $2, 'native', '1 minute', p_premake := $3, "
                "p_start_partition := $4, p_jobmon := false)",
                f"public.{table}", column, AHEAD, start)
        await conn.execute("UPDATE partman.part_config SET infinite_time_partitions = true, "
                           "retention_keep_table = false")
    return url


async def fall_behind(conn: asyncpg.Connection) -> None:
    """As if maintenance had been down: no partition for now or after it."""
    for table, _, _ in TABLES:
        for (part,) in await conn.fetch(
                "SELECT part::text FROM webhook_partitions($1::regclass) "
                "WHERE NOT is_default AND upper_bound > clock_timestamp()", table):
            await conn.execute(f"DROP TABLE {part}")


async def now_and_ahead(conn: asyncpg.Connection) -> Result:
    row = await conn.fetchrow(
        "SELECT bool_or(lower_bound <= clock_timestamp()) AS now, count(*) AS ahead "
        "FROM webhook_partitions('webhook_event') "
        "WHERE NOT is_default AND upper_bound > clock_timestamp()")
    return {"partition for now": bool(row["now"]), "partitions ahead": row["ahead"]}


# -- a: catch-up -----------------------------------------------------------------------------

async def catch_up(url: str, maintain: Callable[[str], Awaitable[str]], *,
                   quiet: bool = False) -> Result:
    """``quiet``: the claims stop before maintenance begins (a quiet moment to catch up in)."""
    conn = await asyncpg.connect(url)
    store = await PostgresStore.connect(url, min_size=2, max_size=8, partition_interval=STEP)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    claims: list[tuple[float, float]] = []  # (started, waited)
    errors: list[str] = []
    try:
        await fall_behind(conn)

        async def flow(n: int) -> None:
            due, i = loop.time(), 0
            while not stop.is_set():
                due += FLOWS / RATE
                await asyncio.sleep(max(0.0, due - loop.time()))  # pacing the load, not sync
                started = loop.time()
                try:
                    await store.claim("stripe", f"c{n}_{i}", BODY, 30.0, "o")
                    claims.append((started, loop.time() - started))
                except Exception as exc:  # every failure is a finding: count it, go on
                    errors.append(f"{type(exc).__name__}: {exc}"[:160])
                i += 1

        flows = [asyncio.create_task(flow(n)) for n in range(FLOWS)]
        await asyncio.sleep(BEHIND)  # the load runs for this long without maintenance
        if quiet:
            stop.set()
            await asyncio.gather(*flows)
        in_default = await conn.fetchval("SELECT count(*) FROM ONLY webhook_event_default")
        began = loop.time()
        notes = await outcome(maintain(url))
        took = loop.time() - began
        await asyncio.sleep(0.0 if quiet else max(0.0, AFTER - took))
        stop.set()
        await asyncio.gather(*flows)
        during = sorted(w for s, w in claims if s >= began - 1.0 and s <= began + took)
        after = await conn.fetchval("SELECT count(*) FROM ONLY webhook_event_default")
        return {"default rows before": in_default, "maintenance s": round(took, 2),
                **await now_and_ahead(conn), "default rows after": after,
                "claims during": len(during), "wait p99 ms": ms(during, 0.99),
                "wait max ms": ms(during, 1.0), "claim errors": len(errors),
                "first error": errors[0] if errors else "", "maintenance": notes}
    finally:
        stop.set()
        await store.close()
        await conn.close()


def ms(waits: list[float], q: float) -> float | None:
    return round(1000 * waits[int(q * (len(waits) - 1))], 1) if waits else None


async def ours_maintain(url: str) -> str:
    made = await PartitionKeeper(url, interval=STEP, ahead=AHEAD).make_ahead()
    return f"made {made.made}, busy {list(made.busy)}"


async def partman_maintain(url: str) -> str:
    """run_maintenance_proc, partition_data_proc of each table, run_maintenance_proc again."""
    notes = []
    steps = ["CALL partman.run_maintenance_proc()", *(
        f"CALL partman.partition_data_proc('public.{t}', p_wait := 0)" for t, _, _ in TABLES)]
    async with connected(url) as conn:
        for sql in [*steps, steps[0]]:
            began = time.monotonic()
            notes.append(await outcome(conn.fetchval(sql)) + f" {time.monotonic() - began:.2f}s")
    return " | ".join(notes)


async def outcome(step: Awaitable[object]) -> str:
    """The step's result (a str), "ok", or the error's first line."""
    try:
        result = await step
    except Exception as exc:  # a finding to report, not the harness failing
        return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:90]}"
    return result if isinstance(result, str) else "ok"


# -- b: retention of a busy partition --------------------------------------------------------

async def leased_in_the_past(url: str, at: datetime, event_id: str) -> None:
    """A claimed event (live lease) received ``at``."""
    store = await PostgresStore.connect(url, min_size=1, max_size=2, partition_interval=STEP)
    try:
        assert (await store.claim("stripe", event_id, BODY, 3600.0, "o")).won
    finally:
        await store.close()
    async with connected(url) as conn, conn.transaction():
        await conn.execute("CREATE TEMP TABLE moved ON COMMIT DROP AS SELECT * "
                           "FROM webhook_event WHERE event_id = $1", event_id)
        await conn.execute("DELETE FROM webhook_event WHERE event_id = $1", event_id)
        await conn.execute("UPDATE moved SET received_at = $1", at)
        await conn.execute("INSERT INTO webhook_event SELECT * FROM moved")


async def busy_outcome(url: str, event_id: str) -> dict[str, Any]:
    async with connected(url) as conn:
        return {"leased row kept": bool(await conn.fetchval(
                    "SELECT count(*) FROM webhook_event WHERE event_id = $1", event_id)),
                "old partitions left": await conn.fetchval(
                    "SELECT count(*) FROM webhook_partitions('webhook_event') WHERE NOT "
                    "is_default AND upper_bound < now() - interval '2 minutes'")}


async def retention_ours(admin: str) -> Result:
    url = await ours(admin, "cmp_b_ours")
    # old partitions of a minute, ten to twelve minutes back, the lease in the middle one
    async with connected(url) as conn:
        first = await conn.fetchval("SELECT min(lower_bound) FROM webhook_partitions("
                                    "'webhook_event') WHERE NOT is_default")
        for n in (1, 2, 3):
            lo = first - timedelta(seconds=STEP * (9 + n))
            await conn.execute(f"CREATE TABLE webhook_event_old{n} PARTITION OF webhook_event "
                               f"FOR VALUES FROM ('{lo.isoformat()}') "
                               f"TO ('{(lo + timedelta(seconds=STEP)).isoformat()}')")
    await leased_in_the_past(url, first - timedelta(seconds=STEP * 11 - 30), "leased")
    began = time.monotonic()
    retired = await PartitionKeeper(url, interval=STEP, ahead=AHEAD).retire({"stripe": 60.0})
    took = time.monotonic() - began
    kept = [(name, str(why)) for name, why in retired.kept]
    return {"manager": "ours", **await busy_outcome(url, "leased"),
            "run": f"dropped {len(retired.dropped)}, kept {kept} ({took:.2f}s)"}


async def retention_partman(admin: str, name: str, check: bool) -> Result:
    url = await partman(admin, name)
    await leased_in_the_past(url, datetime.now(UTC) - timedelta(minutes=9.5), "leased")
    async with connected(url) as conn:
        if check:
            await conn.execute(KEEP_BUSY)
        await conn.execute("UPDATE partman.part_config SET retention = '2 minutes'")
        began = time.monotonic()
        run = await outcome(conn.fetchval("CALL partman.run_maintenance_proc()"))
        run += f" ({time.monotonic() - began:.2f}s)"
    label = "pg_partman + pre-drop check" if check else "pg_partman"
    return {"manager": label, **await busy_outcome(url, "leased"), "run": run}


# -- c: behind pgbouncer ---------------------------------------------------------------------

@contextmanager
def pgbouncer(server_port: int) -> Iterator[int]:
    """pgbouncer in pool_mode=transaction on a free loopback port, as tests/pgbouncer.py."""
    port = free_port()
    work = tempfile.mkdtemp(prefix="partman-cmp-pgbouncer-")
    os.chmod(work, 0o755)
    Path(f"{work}/users.txt").write_text('"postgres" ""\n')
    Path(f"{work}/pgbouncer.ini").write_text(
        f"[databases]\n* = host=127.0.0.1 port={server_port}\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {work}/users.txt\npool_mode = transaction\n"
        f"default_pool_size = 4\nserver_reset_query =\nlogfile = {work}/pgbouncer.log\n"
        "ignore_startup_parameters = extra_float_digits\n")
    prefix = _as_postgres_user() if os.geteuid() == 0 else []
    if prefix:
        for path in (work, f"{work}/users.txt", f"{work}/pgbouncer.ini"):
            shutil.chown(path, "postgres")
    proc = subprocess.Popen([*prefix, "/usr/sbin/pgbouncer", f"{work}/pgbouncer.ini"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(150):  # polling the port it is to listen on, 15 s at most
            if subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)],
                              check=False).returncode == 0 or proc.poll() is not None:
                break
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def via(url: str, port: int) -> str:
    return url.replace(url.split("@", 1)[1].split("/", 1)[0], f"127.0.0.1:{port}")


async def pooled_maintenance(url: str, bouncer: str, run: Callable[[str], Awaitable[str]]
                             ) -> Result:
    async with connected(url) as conn:
        await fall_behind(conn)
        notes = await outcome(run(bouncer))
        return {**await now_and_ahead(conn), "run": notes}


async def ours_pooled(bouncer: str) -> str:
    keeper = PartitionKeeper(bouncer, interval=STEP, ahead=AHEAD, statement_cache_size=0)
    made = await keeper.make_ahead()
    retired = await keeper.retire({"stripe": 60.0})
    return f"made {made.made}; retire dropped {len(retired.dropped)}"


async def partman_pooled(bouncer: str) -> str:
    async with connected(bouncer, statement_cache_size=0) as conn:
        await conn.execute("CALL partman.run_maintenance_proc()")
        return f"ok; search_path after: {await conn.fetchval('SHOW search_path')}"


async def background_worker(url: str) -> Result:
    """pg_partman_bgw (interval 2 s) on BGW_DB: does it make the partition for now again?"""
    async with connected(url) as conn:
        await conn.execute("UPDATE partman.part_config SET automatic_maintenance = 'off'")
        await fall_behind(conn)
        began = time.monotonic()
        await conn.execute("UPDATE partman.part_config SET automatic_maintenance = 'on'")
        for _ in range(150):  # polling for the worker's next round, 30 s at most
            if (await now_and_ahead(conn))["partition for now"]:
                break
            await asyncio.sleep(0.2)
        took = time.monotonic() - began
        return {**await now_and_ahead(conn), "run": f"worker's round after {took:.1f}s"}


# -- the run ---------------------------------------------------------------------------------

def table(title: str, results: list[Result]) -> None:
    print(f"\n## {title}")
    for result in results:
        print("  " + "; ".join(f"{k}: {v}" for k, v in result.items()))


async def compare(cluster: ThrowawayCluster) -> None:
    admin = cluster.dsn
    # The background worker's case first: its database must exist while the worker starts.
    bgw = {"manager": "pg_partman, background worker",
           **await background_worker(await partman(admin, BGW_DB))}
    a = []
    for quiet in (False, True):
        for label, setup, maintain in (("ours", ours, ours_maintain),
                                       ("pg_partman", partman, partman_maintain)):
            name = f"cmp_a_{label}{'_quiet' if quiet else ''}"
            url = await setup(admin, name)
            a.append({"manager": label + (", claims stopped first" if quiet else ""),
                      **await catch_up(url, maintain, quiet=quiet)})
            await drop_database(admin, name)
    table(f"a. catch-up ({RATE:.0f} claims/s, {BEHIND:.0f}s behind, {AFTER:.0f}s of "
          f"maintenance and claims)", a)
    b = [await retention_ours(admin),
         await retention_partman(admin, "cmp_b_partman", check=False),
         await retention_partman(admin, "cmp_b_check", check=True)]
    table("b. retention of a partition holding a live lease (retention 1-2 minutes)", b)
    c = []
    assert cluster.port
    with pgbouncer(cluster.port) as port:
        url = await ours(admin, "cmp_c_ours")
        c.append({"manager": "ours, our process", **await pooled_maintenance(
            url, via(url, port), ours_pooled)})
        url = await partman(admin, "cmp_c_partman")
        c.append({"manager": "pg_partman, our process", **await pooled_maintenance(
            url, via(url, port), partman_pooled)})
    c.append(bgw)
    table("c. behind pgbouncer (pool_mode=transaction)", c)
    for name in ("cmp_b_ours", "cmp_b_partman", "cmp_b_check", "cmp_c_ours", "cmp_c_partman",
                 BGW_DB):
        await drop_database(admin, name)


def main() -> None:
    if not os.path.exists("/usr/share/postgresql/15/extension/pg_partman.control"):
        raise SystemExit("pg_partman is not installed: apt-get install postgresql-15-partman")
    settings = {"shared_preload_libraries": "pg_partman_bgw", "pg_partman_bgw.dbname": BGW_DB,
                "pg_partman_bgw.interval": "2", "pg_partman_bgw.role": "postgres"}
    with ThrowawayCluster(fsync=False, settings=settings) as cluster:
        asyncio.run(compare(cluster))


if __name__ == "__main__":
    main()
