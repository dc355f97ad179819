"""The servers a phase measures: webhook-sidecar (on a fresh store), the Node + Redis
competitor, and the pass-through and hello-world floors."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from bench.wrk.context import Context
from bench.wrk.deliveries import PATH, SECRET, new_ids, prime
from bench.wrk.phases import Phase
from bench.wrk.procs import (
    REPO,
    BenchError,
    Proc,
    die_with_parent,
    free_port,
    wait_listening,
    wait_port,
)
from bench.wrk.stores import migrate, seed_postgres, seed_sqlite

COMPETITOR = REPO / "bench" / "competitor"


def sidecar_config(ctx: Context, store_url: str, *, queue: bool = False,
                   destinations: int = 0) -> Path:
    provider: dict[str, Any] = {"path": PATH, "preset": "github", "secrets": [SECRET]}
    if queue:
        provider["mode"] = "queue"
    if destinations:  # each to the one app (the top-level upstream)
        provider["destinations"] = [{"name": f"app{i + 1}"} for i in range(destinations)]
    config = {
        "listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0", "shutdown_timeout": "2s",
        "upstream": {"url": ctx.app.url, "timeout": "5s"},
        "store": {"url": store_url, "pool_max_size": 10},
        "log": {"level": ctx.args.log_level, "format": "json"},
        "maintenance": {"interval": "1h"},
        "providers": {"github": provider},
    }
    path = ctx.path("sidecar.yaml")
    path.write_text(yaml.safe_dump(config))
    return path


# `python -m sidecar`, its event loop switched to uvloop's (--sidecar-loop uvloop): the
# shipped code runs asyncio.run(), which takes the loop from the policy.
UVLOOP_SIDECAR = ("import asyncio, sys, uvloop; "
                  "asyncio.set_event_loop_policy(uvloop.EventLoopPolicy()); "
                  "from sidecar.cli import main; raise SystemExit(main(sys.argv[1:]))")


async def start_sidecar(ctx: Context, config: Path, name: str = "sidecar", *,
                        before: bool = False) -> tuple[Proc, str]:
    """``python -m sidecar run``, from this tree or (``before``) from ``--before``'s: run in
    that directory, ``-m`` finds its ``sidecar`` package first (same interpreter, same
    installed dependencies)."""
    launch = (["-c", UVLOOP_SIDECAR] if ctx.args.sidecar_loop == "uvloop"
              else ["-m", "sidecar"])
    tree = ctx.args.before if before else REPO
    proc = await ctx.procs.start(
        name, [sys.executable, *launch, "run", "--config", str(config)],
        ctx.path(f"{name}.log"),
        # A tree that picks its own loop (sidecar.runtime.loop) is told the one asked for.
        env={"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(tree),
             "WEBHOOK_SIDECAR_LOOP": ctx.args.sidecar_loop},
        cwd=tree)
    return proc, "http://" + await wait_listening(proc)


async def prepare_stores(ctx: Context) -> None:
    """The PostgreSQL template (migrated, seeded) and the seeded SQLite template file, for the
    stores the run uses (MariaDB's databases are made and migrated per phase)."""
    rows = ctx.args.seed_rows
    if ctx.pg is not None:
        await ctx.pg.create(ctx.pg.template)
        store_url = ctx.pg.dsn(ctx.pg.template)
        await migrate(sidecar_config(ctx, store_url))
        if rows:
            await seed(ctx, store_url, rows)
    if "sqlite" in ctx.args.stores and rows:
        ctx.sqlite_template = ctx.tmp / "template.db"
        await seed(ctx, f"sqlite:///{ctx.sqlite_template}", rows)


async def seed(ctx: Context, store_url: str, rows: int) -> None:
    """``rows`` done rows in a template store, cloned from one delivered event."""
    print(f"seeding {rows} done rows into the template…", file=sys.stderr, flush=True)
    started = time.monotonic()
    proc, url = await start_sidecar(ctx, sidecar_config(ctx, store_url), "sidecar-seed")
    template_id = new_ids(1)[0]
    await prime(url, [template_id], 1)
    await ctx.procs.stop(proc)
    if store_url.startswith("sqlite:"):
        assert ctx.sqlite_template is not None
        await asyncio.to_thread(seed_sqlite, ctx.sqlite_template, template_id, rows)
    else:
        await seed_postgres(store_url, template_id, rows)
    print(f"seeded in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)


async def fresh_store(ctx: Context, store: str) -> str:
    """A store URL for one phase: a copy of the template (PostgreSQL, SQLite) or a new,
    migrated database (MariaDB)."""
    if store == "postgres":
        assert ctx.pg is not None
        return await ctx.pg.fresh()
    if store == "mariadb":
        assert ctx.maria is not None
        store_url = await ctx.maria.fresh()
        await migrate(sidecar_config(ctx, store_url))
        return store_url
    path = ctx.path("store.db")
    if ctx.sqlite_template is not None:
        shutil.copyfile(ctx.sqlite_template, path)
    return f"sqlite:///{path}"


async def ensure_competitor(ctx: Context) -> None:
    if not (COMPETITOR / "node_modules" / ".package-lock.json").exists() or (
            (COMPETITOR / "package-lock.json").stat().st_mtime
            > (COMPETITOR / "node_modules" / ".package-lock.json").stat().st_mtime):
        print("npm ci in bench/competitor…", file=sys.stderr, flush=True)
        proc = await asyncio.create_subprocess_exec(
            "npm", "ci", "--no-audit", "--no-fund", cwd=str(COMPETITOR),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
        if proc.returncode != 0:
            raise BenchError(f"npm ci failed:\n{out.decode(errors='replace')[-2000:]}")
    if ctx.redis is None:
        port = free_port()
        ctx.redis = await ctx.procs.start(
            "redis-server", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(ctx.tmp),
                             "--databases", "1"], ctx.tmp / "redis.log")
        await wait_port(port, ctx.redis)
        ctx.redis_url = f"redis://127.0.0.1:{port}/0"


async def redis_flush(url: str) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(b"*1\r\n$7\r\nFLUSHDB\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    await writer.wait_closed()
    if not answer.startswith(b"+OK"):
        raise BenchError(f"redis FLUSHDB answered {answer!r}")


async def start_server(ctx: Context, phase: Phase, store_url: str) -> tuple[Proc, str]:
    if phase.server == "sidecar":
        config = sidecar_config(ctx, store_url, queue=phase.queue,
                                destinations=phase.destinations)
        return await start_sidecar(ctx, config, before=phase.before)
    if phase.server == "competitor":
        await redis_flush(ctx.redis_url)
        proc = await ctx.procs.start(
            "competitor", ["node", str(COMPETITOR / "server.mjs")], ctx.path("competitor.log"),
            env={"PORT": "0", "UPSTREAM": ctx.app.url, "REDIS_URL": ctx.redis_url,
                 "SECRET": SECRET}, cwd=COMPETITOR)
        return proc, "http://" + await wait_listening(proc)
    argv = [sys.executable, "-m", f"bench.{phase.server}", "--loop", ctx.args.loop]
    if phase.server == "passthrough":
        argv += ["--upstream", ctx.app.url]
    proc = await ctx.procs.start(phase.server, argv, ctx.path(f"{phase.server}.log"))
    return proc, "http://" + await wait_listening(proc)
