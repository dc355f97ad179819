"""Load and strictly validate the YAML configuration. Every mistake is reported, not only the
first (``ConfigProblems``), each with its key path and, from a file, the line of its key; in the
order written. A value that is wrong is left out, and so is every check that needs it (no
cascade); a check comparing keys says which to change, and their defaults.

What each mapping allows — its keys, their kinds (types, bounds, choices) and defaults — is read
from the declarations on the model's fields (``sidecar.config.model``), in the order declared,
by the declaration engine (``reading.py``). What a declaration cannot say is a step
(``steps.py``: ``STEPS``), each run right after the key it is filed under: comparisons with
earlier keys (``hints.py`` words what to change), values read with the environment or the file
system (``secret_sources.py``), the provider blocks merged over their presets
(``providers.py``). ``LOADER_ONLY_RULES`` lists those the JSON Schema cannot express either.
"""

from __future__ import annotations

import enum
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from sidecar.config.blocks import TOP
from sidecar.config.model import Config, ResultCommit, StoreKind
from sidecar.config.problems import ConfigProblems, Mark, Problem, located, read_yaml
from sidecar.config.reading import Load, interpolated, read_block
from sidecar.config.steps import OWN_INTERPOLATION, STEPS
from sidecar.core.errors import ConfigError

# The JSON Schema accepts configs that break these; the loader rejects them (docs/configuration.md
# lists them, and tests/deploy/cases.py shows each with a config).
LOADER_ONLY_RULES: Final[tuple[str, ...]] = (
    "a value written as ${VAR} is checked after interpolation (an unset variable without a "
    "default is an error)",
    "admin_listen must differ from listen (unless the port is 0)",
    "store.pool_min_size must not exceed store.pool_max_size",
    "providers.<key>.path must be unique across providers",
    "providers.<key>.lease must exceed the provider's upstream.timeout (its own, or the top "
    "level's; for a batch provider, upstream.timeout + inflight_wait); inflight_wait must not "
    "exceed the lease; retention must exceed the lease",
    "secrets: {env: NAME} must be set, {file: PATH} must be readable and not empty, and each "
    "secret must decode with the scheme's secret encoding (base64, hex, key prefixes)",
    "a block given next to a preset is merged over the preset first (an event_id with its own "
    "source, a signature.format of another type, and a handshake with its own when replace "
    "the preset's "
    "whole), and the merged block is checked (e.g. prefix added to a kv_list format)",
    "signature: {timestamp} in the message if and only if a timestamp is set; timestamp "
    "{from: signature} needs a format with timestamp_key, and timestamp_key needs it; {url} in "
    "the message if and only if url is set; append_query needs {url}; separators must differ "
    "and not contain each other; timestamp_key is not a signature key; format.algorithms names "
    "listed versions; at most one public-key algorithm; public_key_prefix when a scheme mixes "
    "shared secrets and public keys",
    "signature url: the port must be a valid number",
    "an integer key (sizes in bytes, pool sizes, statuses, max_length) written as a float such "
    "as 100.0 (a JSON Schema integer; the loader wants a YAML integer)",
    "numbers that do not fit a float (1e400 as text) are not durations",
    "trusted_proxies: a network's host bits must be zero (10.0.0.0/8, not 10.0.0.1/8), an IPv6 "
    "one must be a valid address and not IPv4-mapped",
    "providers.<key>.mode: queue is not available for a batch provider (event_id.batch); "
    "queue.max_retry_delay must not be shorter than queue.first_retry; queue.order_key must be "
    "a JSON path such as $.data.object.id (no wildcards)",
    "store.partitioning.interval: on a PostgreSQL store only, whole seconds, 1m at least",
    "notify.targets[]: a format: slack target takes no secret; a standard target's secret "
    "must be a whsec_ secret (base64 of at least 24 bytes)",
    "providers.<key>.filter: types needs an event type (the preset's event_type or the "
    "provider's own); a glob's [ must be closed; a JSON path selects one value (no [*]); "
    "store_outage: forward is for forward mode only",
    "providers.<key>.destinations[]: each name once; each destination's upstream.timeout below "
    "the provider's lease",
)


class Secrets(enum.Enum):
    """Which secrets a load reads. A secret it does not read is neither interpolated nor
    checked, and is left empty in the config (no keys, no admin token): a command that only
    touches the store (``events list``) then runs where the secrets are not in the
    environment, e.g. on a bastion host. Such a config must not serve."""

    ALL = "all"  # run, check-config, send
    SIGNING = "signing"  # upstream.signing_secrets only: a re-drive signs the forward it makes
    NONE = "none"  # the store settings (and the providers' other keys) are all it needs


# The keys each ``Secrets`` leaves unread, with the value they take instead.
_UNREAD: Final[Mapping[Secrets, Mapping[str, object]]] = {
    Secrets.ALL: {},
    Secrets.SIGNING: {"admin_token": None, "providers.<key>.secrets": (),
                      "notify.targets[].secret": None},
    Secrets.NONE: {"admin_token": None, "upstream.signing_secrets": (),
                   "providers.<key>.upstream.signing_secrets": None,
                   "providers.<key>.destinations[].upstream.signing_secrets": None,
                   "providers.<key>.secrets": (), "notify.targets[].secret": None},
}


def load_config_file(path: str | os.PathLike[str], env: Mapping[str, str] | None = None, *,
                     secrets: Secrets = Secrets.ALL) -> Config:
    """Read, interpolate and validate a YAML config file. Every problem found is reported at
    once (``ConfigProblems``), each with the file, line and column of its key. ``secrets``
    says which secrets to read (all of them unless told otherwise)."""
    return load_config_text(read_config_file(path), env=env,
                            base_dir=Path(path).resolve().parent, source=os.fspath(path),
                            secrets=secrets)


def read_config_file(path: str | os.PathLike[str]) -> str:
    """The config file's text; ``ConfigProblems`` saying why when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigProblems([Problem("", f"cannot read config file {path}: "
                                          f"{exc.strerror}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigProblems([Problem("", f"config file {path} is not UTF-8 text")]) from exc


def load_config_text(
    text: str, env: Mapping[str, str] | None = None, base_dir: Path | None = None,
    source: str = "", *, secrets: Secrets = Secrets.ALL,
) -> Config:
    """As ``load_config_file``, for YAML text; ``source`` names it in messages."""
    document = read_yaml(text, source)
    return _parse(document.data, os.environ if env is None else env, base_dir,
                  document.marks, source, secrets)


def parse_config(
    data: object, env: Mapping[str, str], base_dir: Path | None = None, *,
    secrets: Secrets = Secrets.ALL,
) -> Config:
    """The config for ``data`` as the YAML loader produces it; ``ConfigProblems`` lists every
    mistake, in the order written."""
    return _parse(data, env, base_dir, {}, "", secrets)


def _parse(data: object, env: Mapping[str, str], base_dir: Path | None,
           marks: Mapping[str, Mark], source: str, secrets: Secrets) -> Config:
    load = Load(env=env, base=base_dir or Path.cwd(), unread=_UNREAD[secrets], steps=STEPS,
                own_interpolation=OWN_INTERPOLATION)
    try:
        config = _config(data, load)
    except ConfigError as exc:  # the file is not a mapping: nothing else can be read
        load.report(exc)
        config = None
    if config is None:
        raise ConfigProblems(located(load.problems, data, marks), source)
    return config


def _config(data: object, load: Load) -> Config | None:
    """The config, or ``None`` when a problem was reported."""
    values = read_block(TOP, interpolated(TOP, data, "", "", load), "", "", load)
    if load.problems:
        return None
    store = values["store"]
    if store.kind == StoreKind.MYSQL and store.partitioning.interval is not None:
        load.report(ConfigError("store.partitioning.interval",
                                "partitioning is PostgreSQL's; leave it unset on MySQL"))
        return None
    if store.kind == StoreKind.MYSQL and store.result_commit is not ResultCommit.WAIT:
        load.report(ConfigError("store.result_commit", "no_wait is PostgreSQL's; MySQL "
                                "commits every write durably (leave it at wait)"))
        return None
    if values["store"].kind == StoreKind.SQLITE:
        load.warnings.append("the SQLite store is correct for one host only; use PostgreSQL "
                             "for several replicas")
    if (values["admin_token"] is None and "admin_token" not in load.unread
            and not _is_loopback(values["admin_listen"].host)):
        load.warnings.append(f"admin_listen ({values['admin_listen']}) is not loopback and "
                             "admin_token is unset: /admin/* answers only requests from "
                             "loopback (403 otherwise); /healthz, /readyz and /metrics answer "
                             "everyone")
    return Config(**TOP.fill(values), warnings=tuple(load.warnings),
                  unread_secrets=frozenset(load.unread))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
