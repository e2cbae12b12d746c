"""Open a declared destination: resolve its URL, look its kind up in the registry (:data:`KINDS`),
load its driver, connect.

A missing driver is an error naming the ``pip install`` extra; a URL that names no database,
dataset or namespace says what it should look like.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from lakesync.destination_specs import DestinationSpec, resolve_url
from lakesync.destinations.base import Destination, DestinationError
from lakesync.destinations.bigquery import BigQueryDestination
from lakesync.destinations.lake import LakeDestination, lake_namespace
from lakesync.destinations.sql import SqlDestination
from lakesync.destinations.statements import Dialect
from lakesync.errors import ConfigError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = ["KINDS", "DestinationKindEntry", "destination_kind", "mysql_params",
           "open_destination"]


def _read_file(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _driver(kind: str, module: str, package: str) -> ModuleType:
    """The optional driver ``module`` (extras "connectors", "destinations": only the one in use
    loads); missing, an error naming the ``pip install`` extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DestinationError(
            f"the {kind} destination needs the {package} package: "
            "pip install 'lakesync[destinations]'"
        ) from None


def mysql_params(url: str) -> dict[str, object]:
    """PyMySQL connection arguments from ``mysql://user:password@host:port/db``."""
    parts = urlsplit(url)
    database = parts.path.lstrip("/")
    if not database:
        raise ConfigError("a mysql url names its database: mysql://user:password@host:3306/db")
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "database": unquote(database),
    }


Opener = Callable[
    [DestinationSpec, str, Mapping[str, str], "Callable[[], Catalog] | None"], Destination
]
"""Opens one kind of destination: its spec, its resolved URL, the environment and the lake's
catalog opener (None where the caller has no lake)."""


@dataclass(frozen=True, slots=True)
class DestinationKindEntry:
    """One registered kind of destination: its adapter class (whose class-level capabilities,
    such as :attr:`~lakesync.destinations.base.Destination.lives_in_lake`, callers ask), how to
    open one, and the SQL dialect its change sets hold storable values for (None: the values
    as the lake types them)."""

    type: type[Destination]
    open: Opener
    dialect: Dialect | None = None


def _open_postgres(
    spec: DestinationSpec, url: str, env: Mapping[str, str], catalog: Callable[[], Catalog] | None
) -> Destination:
    psycopg = _driver("postgres", "psycopg", "psycopg")
    return SqlDestination(
        spec, "postgres", lambda: psycopg.connect(url, connect_timeout=10),
        (psycopg.Error,), url,
    )


def _open_mysql(
    spec: DestinationSpec, url: str, env: Mapping[str, str], catalog: Callable[[], Catalog] | None
) -> Destination:
    pymysql = _driver("mysql", "pymysql", "PyMySQL")
    params = mysql_params(url)

    def connect() -> object:
        return pymysql.connect(
            **params,
            charset="utf8mb4", autocommit=False, connect_timeout=10,
            init_command="SET time_zone = '+00:00'",
        )

    return SqlDestination(spec, "mysql", connect, (pymysql.MySQLError,), url)


def _open_bigquery(
    spec: DestinationSpec, url: str, env: Mapping[str, str], catalog: Callable[[], Catalog] | None
) -> Destination:
    return BigQueryDestination.from_url(spec, url, env)


def _open_lake(
    spec: DestinationSpec, url: str, env: Mapping[str, str], catalog: Callable[[], Catalog] | None
) -> Destination:
    if catalog is None:
        raise ConfigError(
            f"destination {spec.name!r} is a lake destination: open it with the lake's catalog "
            "(lakesync.lakehouse.catalog.lake_catalog)"
        )
    return LakeDestination(spec, catalog(), lake_namespace(spec, url))


KINDS: Mapping[str, DestinationKindEntry] = {
    "postgres": DestinationKindEntry(SqlDestination, _open_postgres, "postgres"),
    "mysql": DestinationKindEntry(SqlDestination, _open_mysql, "mysql"),
    "bigquery": DestinationKindEntry(BigQueryDestination, _open_bigquery, "bigquery"),
    "lake": DestinationKindEntry(LakeDestination, _open_lake),
}
"""Every kind of destination a declaration may name (``kind:``), by name."""


def destination_kind(kind: str) -> DestinationKindEntry:
    """The registered ``kind`` (a :class:`~lakesync.errors.ConfigError` naming the known ones
    for any other)."""
    entry = KINDS.get(kind)
    if entry is None:
        raise ConfigError(f"unknown destination kind {kind!r} (kinds: {', '.join(KINDS)})")
    return entry


def open_destination(
    spec: DestinationSpec,
    env: Mapping[str, str] | None = None,
    catalog: Callable[[], Catalog] | None = None,
) -> Destination:
    """Connect to the destination ``spec`` declares (its URL's references taken from ``env``,
    default the process environment), opened by its kind's entry in :data:`KINDS`. A ``lake``
    destination lives in the Iceberg catalog that ``catalog`` opens (the lakehouse passes
    :func:`lakesync.lakehouse.catalog.lake_catalog`; destinations sit below the lakehouse and
    never open a lake by themselves; other kinds ignore it)."""
    env = os.environ if env is None else env
    url = resolve_url(spec, env, _read_file)
    return destination_kind(spec.kind).open(spec, url, env, catalog)
