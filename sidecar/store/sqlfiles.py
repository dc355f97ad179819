"""Load the adapters' ``.sql`` files from the package, once.

Queries live in ``sql/<dialect>/<name>.sql``; migrations in ``sql/<dialect>/migrations/``.
Files are read with ``importlib.resources`` so they work from a wheel or a zip as well as from a
source checkout.
"""

from __future__ import annotations

import functools
from importlib import resources
from importlib.resources.abc import Traversable

DIALECTS = ("postgres", "sqlite")


def _dialect_dir(dialect: str) -> Traversable:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}; expected one of {DIALECTS}")
    return resources.files("sidecar.store").joinpath("sql", dialect)


@functools.cache
def query(dialect: str, name: str) -> str:
    """The text of ``sql/<dialect>/<name>.sql``, read once per process."""
    path = _dialect_dir(dialect).joinpath(f"{name}.sql")
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {dialect}/{name}.sql in the sidecar.store package")
    return path.read_text(encoding="utf-8")


def migrations_dir(dialect: str) -> Traversable:
    """The folder holding ``dialect``'s numbered migration files."""
    return _dialect_dir(dialect).joinpath("migrations")
