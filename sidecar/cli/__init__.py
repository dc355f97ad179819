"""The command line: run, migrate, store, check-config, events, providers, demo, send,
completion."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sidecar import __version__
from sidecar.compiled import compiled
from sidecar.config.loader import Secrets, load_config_file, load_config_text, read_config_file
from sidecar.config.model import Config
from sidecar.config.problems import ConfigProblems
from sidecar.core.durations import format_duration
from sidecar.core.errors import ConfigError, SchemaError, StoreError
from sidecar.obs.logs import configure_logging
from sidecar.obs.tracing import check_environment
from sidecar.runtime import loop

CONFIG_ENV = "WEBHOOK_SIDECAR_CONFIG"
EXIT_CONFIG = 2
EXIT_STORE = 1
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a process SIGPIPE ended


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit: a reader that went away is handled below
    except BrokenPipeError:
        # Whoever read our output is gone (`events list --json | head`): stop quietly, as
        # Python's documentation of SIGPIPE advises. Output still buffered goes to devnull, so
        # the flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    try:
        chosen = loop.choose()  # a bad WEBHOOK_SIDECAR_LOOP stops every command, at once
    except ConfigError as exc:
        print(f"webhook-sidecar: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    parser = _parser(chosen)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_CONFIG
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"webhook-sidecar: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except SchemaError as exc:
        print(f"webhook-sidecar: {exc}", file=sys.stderr)
        return EXIT_STORE
    except StoreError as exc:
        print(f"webhook-sidecar: store unavailable: {exc}", file=sys.stderr)
        return EXIT_STORE
    except KeyboardInterrupt:
        return 130


def default_config() -> str | None:
    """The config file of a subcommand run without ``--config``: ``$WEBHOOK_SIDECAR_CONFIG``
    (inside the pod the chart sets it, so no subcommand needs the flag there)."""
    return os.environ.get(CONFIG_ENV) or None


def _parser(chosen: loop.EventLoop | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="webhook-sidecar",
        description="A verifying, deduplicating reverse proxy for inbound webhooks.",
    )
    build = f"compiled: {str(compiled()).lower()}"  # mypyc's modules, or the pure source
    if chosen is not None:
        build += f", loop: {chosen}"
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__} ({build})")
    sub = parser.add_subparsers(dest="command")

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", "-c", default=default_config(),
                       help=f"YAML config file (default: ${CONFIG_ENV})")

    def command(name: str, about: str, func: Callable[[argparse.Namespace], int],
                configure: Callable[[argparse.ArgumentParser], object] = with_config
                ) -> argparse.ArgumentParser:
        """A subcommand running ``func``; its arguments are ``configure``'s (``--config``)."""
        p = sub.add_parser(name, help=about)
        configure(p)
        p.set_defaults(func=func)
        return p

    from sidecar.cli import events, notify, providers, send

    run = command("run", "run the proxy", _run)
    # Internal: set by the supervisor of `workers` > 1 for each worker it starts.
    run.add_argument("--worker", help=argparse.SUPPRESS)
    command("migrate", "apply database migrations, then exit", _migrate)

    store = sub.add_parser("store", help="change how the store keeps its rows")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    partition = store_sub.add_parser(
        "partition", help="switch a live PostgreSQL store to partitions "
        "(store.partitioning.interval), stopping deliveries for one short transaction")
    with_config(partition)
    partition.set_defaults(func=_store_partition)

    command("check-config", "validate a config file, then exit", _check_config)
    command("events", "list, show, release or re-drive events", _events,
            lambda p: events.configure_parser(p, with_config))
    command("providers", "pause, resume or see providers' deliveries", _providers,
            lambda p: providers.configure_parser(p, with_config))
    command("demo", "a self-contained showcase on a temporary SQLite store", _demo,
            lambda p: p.add_argument("--quiet", action="store_true",
                                     help="print only the summary"))
    command("send", "sign a payload as a provider and deliver it to a URL", _send,
            send.configure_parser)
    command("notify", "notification targets (notify:): send a test", _notify,
            lambda p: notify.configure_parser(p, with_config))
    command("completion", "print a shell completion script", _completion,
            lambda p: p.add_argument("shell", choices=("bash", "zsh", "fish")))
    return parser


def _config_path(args: argparse.Namespace) -> str:
    if not args.config:
        raise ConfigError("", f"no config file: pass --config PATH or set ${CONFIG_ENV}")
    return str(args.config)


def _load(args: argparse.Namespace, secrets: Secrets = Secrets.ALL) -> Config:
    return load_config_file(_config_path(args), secrets=secrets)


def _run(args: argparse.Namespace) -> int:
    if args.worker is not None:  # one of `workers` processes, started by the supervisor
        from sidecar.runtime.workers import run_worker

        return run_worker(args.worker)  # the config is the supervisor's copy
    path = _config_path(args)
    # Read once: a group's workers start from this very text (sidecar.runtime.workers).
    text = read_config_file(path)
    folder = Path(path).resolve().parent
    config = load_config_text(text, base_dir=folder, source=path)
    check_environment(config.tracing)  # before a worker starts: one clear error, exit 2
    configure_logging(config.log_level, config.log_format)
    if config.workers > 1:
        from sidecar.runtime.workers import ConfigFile, supervise

        return loop.run(supervise(config, ConfigFile(text, path, str(folder))))
    from sidecar.runtime.serve import serve

    return loop.run(serve(config))


def _migrate(args: argparse.Namespace) -> int:
    from sidecar.runtime.stores import migrate_store

    config = _load(args)
    configure_logging(config.log_level, config.log_format)
    applied = loop.run(migrate_store(config.store))
    if config.store.kind == "sqlite":  # the embedded store migrates itself when opened
        print(f"sqlite store at {config.store.sqlite_path} is up to date")
    elif applied:
        print("applied: " + ", ".join(applied))
    else:
        print("database schema is up to date")
    return 0


def _store_partition(args: argparse.Namespace) -> int:
    from sidecar.runtime.stores import partition_existing_store

    config = _load(args)
    configure_logging(config.log_level, config.log_format)
    if config.store.kind == "sqlite" or config.store.partitioning.interval is None:
        raise ConfigError("store.partitioning.interval", "set it (e.g. 1d) on a PostgreSQL "
                          "store to switch the store to partitions")
    if loop.run(partition_existing_store(config.store)):
        print("the store is partitioned now: start (or restart) the proxies with this config")
    else:
        print("the store was partitioned already")
    return 0


def _check_config(args: argparse.Namespace) -> int:
    try:
        config = _load(args)
        check_environment(config.tracing)  # the OTEL_* variables the tracing keys fall back to
    except ConfigError as exc:
        _print_problems(exc, args.config)
        return EXIT_CONFIG
    print(f"config OK: listen {config.listen}, admin {config.admin_listen}, "
          f"store {config.store.kind} ({config.store.redacted_url})")
    for p in config.providers:
        print(f"  {p.key}: POST {p.path}  preset={p.preset or '-'}  secrets={len(p.secrets)}  "
              f"lease={format_duration(p.lease)}  "
              f"inflight_wait={format_duration(p.inflight_wait)}  "
              f"retention={format_duration(p.retention)}")
        if p.routes:
            print(f"    destinations: {', '.join(r.key for r in p.routes)}")
    for url, keys in _providers_by_upstream(config).items():
        print(f"upstream {url}: {', '.join(keys)}")
    if config.notify.targets:
        from sidecar.ops.notify import target_name

        print(f"notify: {', '.join(target_name(t) for t in config.notify.targets)}; at most "
              f"one message per condition every {format_duration(config.notify.interval)}")
    for warning in config.warnings:
        print(f"warning: {warning}")
    return 0


def _providers_by_upstream(config: Config) -> dict[str, list[str]]:
    """The providers sharing each upstream URL (credentials in it redacted), in the order
    the providers are written."""
    shared: dict[str, list[str]] = {}
    for p in config.app_routes:  # a provider with destinations: each destination's
        shared.setdefault(p.upstream.redacted_url, []).append(p.key)
    return shared


def _print_problems(error: ConfigError, source: str | None) -> None:
    """Every problem on a line of its own on stderr (``config.yaml:12:5: key: message``), then
    how many there are."""
    lines = error.lines if isinstance(error, ConfigProblems) else (str(error),)
    count = f"{len(lines)} problem{'' if len(lines) == 1 else 's'}"
    for line in lines:
        print(line, file=sys.stderr)
    print(f"{count} in {source}" if source else count, file=sys.stderr)


def _events(args: argparse.Namespace) -> int:
    from sidecar.cli.events import run, secrets_needed

    config = _load(args, secrets_needed(args))
    configure_logging("warning", config.log_format)
    return run(config, args)


def _providers(args: argparse.Namespace) -> int:
    from sidecar.cli.providers import run

    config = _load(args, Secrets.NONE)  # the store is all it needs
    configure_logging("warning", config.log_format)
    return run(config, args)


def _demo(args: argparse.Namespace) -> int:
    from sidecar.cli.demo import run_demo

    return loop.run(run_demo(quiet=args.quiet))


def _send(args: argparse.Namespace) -> int:
    from sidecar.cli.send import run

    return run(args)


def _notify(args: argparse.Namespace) -> int:
    from sidecar.cli.notify import run

    config = _load(args)
    configure_logging("warning", config.log_format)
    return run(config, args)


def _completion(args: argparse.Namespace) -> int:
    from sidecar.cli.completion import script

    print(script(args.shell, _parser()), end="")
    return 0
