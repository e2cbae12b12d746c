"""Open the hot-log store a URL names: SQLite or PostgreSQL, behind one interface
(:class:`~lakesync.hotlog.base.HotLog`)."""

from __future__ import annotations

from pathlib import Path

from lakesync.config import StoreConfig
from lakesync.errors import ConfigError
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.hotlog.sqlite import SqliteHotLog

__all__ = ["open_store"]


def open_store(
    url: str,
    data_dir: Path,
    clock: HLC,
    pg_schema: str = "lakesync",
    limits: StoreConfig = StoreConfig(),  # noqa: B008 (frozen: one shared default is safe)
) -> HotLog:
    """Open the store named by ``url``: ``sqlite`` (a file in ``data_dir``), ``sqlite:///path``
    or a ``postgresql://`` DSN (tables in ``pg_schema``, sessions under ``limits``)."""
    if url == "sqlite":
        return SqliteHotLog(data_dir / "hotlog.sqlite3", clock)
    if url.startswith("sqlite:///"):
        return SqliteHotLog(Path(url.removeprefix("sqlite:///")), clock)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresHotLog(url, clock, schema=pg_schema, limits=limits)
    raise ConfigError(f"unknown store url {url!r}; use 'sqlite', 'sqlite:///path' or postgresql://")
