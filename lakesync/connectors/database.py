"""Tables as sources (PostgreSQL, MySQL/MariaDB here; BigQuery through its own
:class:`Dialect` in :mod:`lakesync.connectors.bigquery`), by one of two strategies:

- **cursor**: rows whose ``cursor_column`` (a number or timestamp that grows on every insert
  and update) is at or above the stored cursor minus ``lookback`` (rows committed late with a
  lower value are still found), in cursor order, streamed; the cursor is the greatest value
  stored. Deletions are not seen (use ``diff`` or ``postgres_cdc``).
- **diff**: the whole table streamed in key order each poll and compared with the gateway's rows
  (only changes are pushed); rows the gateway stores for the table and the pass did not see are
  deleted (the gateway table mirrors the source table). The ids seen go to a temporary file
  (:class:`~lakesync.connectors._spill.SpilledKeys`) and the gateway's ids are paged through, so
  memory
  holds one chunk of rows, whatever the table's size; there is no cursor.

Both stream with a server-side cursor (PostgreSQL) or an unbuffered one (MySQL), so a poll holds
at most ``chunk_rows`` rows. Statements are composed from identifiers (``psycopg.sql`` /
backtick quoting) and parameters, never by pasting values. The drivers are synchronous; every
call runs in a worker thread.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar
from urllib.parse import unquote, urlsplit

from lakesync.connector_specs import DatabaseSpec, TableReadSpec
from lakesync.connectors._changes import Chunk
from lakesync.connectors._spill import SpilledKeys
from lakesync.connectors._types import SourceColumn, map_column
from lakesync.connectors._values import json_value
from lakesync.connectors.base import Source
from lakesync.errors import ConfigError
from lakesync.schema import TableSchema, parse_schema

__all__ = [
    "DatabaseSource",
    "Dialect",
    "MysqlDialect",
    "PostgresDialect",
    "row_id_of",
    "source_schema",
]

_log = logging.getLogger("lakesync.connectors")

S = TypeVar("S", bound=TableReadSpec)


def row_id_of(row: Mapping[str, Any], key: Sequence[str]) -> str:
    """A row's id: its key values as text, joined with ``:``."""
    return ":".join(str(json_value(row[k])) for k in key)


def source_schema(
    table: str, columns: Sequence[SourceColumn], warned: set[str]
) -> TableSchema:
    """The gateway table of source ``columns``, typed by :func:`map_column`; a column whose
    type has no mapping (it is brought as ``string``) is logged once (``warned`` holds the
    ``table.column`` names already logged)."""
    declared = []
    for col in columns:
        spec, warning = map_column(col)
        if warning is not None and f"{table}.{col.name}" not in warned:
            warned.add(f"{table}.{col.name}")
            _log.warning("table %s: %s", table, warning)
        declared.append(spec)
    return parse_schema({"table": table, "columns": declared})


def _split_table(name: str) -> tuple[str | None, str]:
    schema, _, table = name.rpartition(".")
    return schema or None, table


class Dialect(abc.ABC, Generic[S]):
    """What differs between the systems read as tables: connecting, quoting, streaming, typing."""

    @abc.abstractmethod
    def open(self, spec: S) -> Any:
        """A new connection to the system ``spec`` reads."""

    @abc.abstractmethod
    def stream(
        self, conn: Any, spec: S, columns: Sequence[str], since: Any
    ) -> AbstractContextManager[Iterator[dict[str, Any]]]:
        """The rows to read, as dicts, streamed: ``since`` None = every row in key order,
        else rows with the cursor column >= ``since`` in cursor order."""

    @abc.abstractmethod
    def columns(self, conn: Any, spec: S) -> list[SourceColumn]:
        """The source table's columns and their types, in order."""


class SqlDialect(Dialect[DatabaseSpec]):
    """The SQL databases, reached by a DSN."""

    @abc.abstractmethod
    def connect(self, dsn: str) -> Any:
        """A new connection (autocommit off)."""

    def open(self, spec: DatabaseSpec) -> Any:
        return self.connect(spec.dsn)


def _where_order(spec: TableReadSpec, since: Any, q: Any) -> tuple[list[Any], list[Any]]:
    """(filter columns, order columns) for ``stream``; ``q`` quotes an identifier."""
    if since is None:
        return [], [q(k) for k in spec.key]
    return [q(spec.cursor_column)], [q(spec.cursor_column), *(q(k) for k in spec.key)]


class PostgresDialect(SqlDialect):
    """psycopg 3, a named (server-side) cursor per poll."""

    def connect(self, dsn: str) -> Any:
        # optional driver (extras "connectors", "destinations"): only the one in use loads
        import psycopg  # noqa: PLC0415

        return psycopg.connect(dsn)

    def columns(self, conn: Any, spec: DatabaseSpec) -> list[SourceColumn]:
        schema, table = _split_table(spec.source_table)
        return self.table_columns(conn, schema, table)

    @staticmethod
    def table_columns(conn: Any, schema: str | None, table: str) -> list[SourceColumn]:
        """The columns of ``schema.table`` (None = the current schema), with their decimals'
        precision and scale and whether their type is an enum."""
        rows = conn.execute(
            "SELECT c.column_name, c.data_type, c.udt_name, c.numeric_precision,"
            " c.numeric_scale, t.typtype = 'e' FROM information_schema.columns c"
            " LEFT JOIN pg_catalog.pg_type t ON t.typname = c.udt_name"
            " AND t.typnamespace = to_regnamespace(c.udt_schema)"
            " WHERE c.table_schema = coalesce(%s, current_schema()) AND c.table_name = %s"
            " ORDER BY c.ordinal_position",
            (schema, table),
        ).fetchall()
        if not conn.autocommit:
            conn.rollback()
        return [
            SourceColumn("postgres", str(n), str(t), str(u), p, s, bool(e))
            for n, t, u, p, s, e in rows
        ]

    def stream(
        self, conn: Any, spec: DatabaseSpec, columns: Sequence[str], since: Any
    ) -> AbstractContextManager[Iterator[dict[str, Any]]]:
        # optional driver (extras "connectors", "destinations"): only the one in use loads
        from psycopg import sql  # noqa: PLC0415
        from psycopg.rows import dict_row  # noqa: PLC0415

        schema, table = _split_table(spec.source_table)
        source = sql.Identifier(*([schema] if schema else []), table)
        where, order = _where_order(spec, since, sql.Identifier)
        query = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in columns), source
        )
        if where:
            query += sql.SQL(" WHERE {} >= %s").format(where[0])
        query += sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(order))
        cursor = conn.cursor(name="lakesync_connector", row_factory=dict_row)
        cursor.itersize = spec.chunk_rows
        return _Stream(conn, cursor, query, () if since is None else (since,))


class _Stream(AbstractContextManager[Iterator[dict[str, Any]]]):
    """A query's rows through an open streaming cursor; leaving ends the read transaction."""

    def __init__(self, conn: Any, cursor: Any, query: Any, params: Any) -> None:
        self.conn, self.cursor, self.query, self.params = conn, cursor, query, params

    def __enter__(self) -> Iterator[dict[str, Any]]:
        self.cursor.execute(self.query, self.params)
        return iter(self.cursor)

    def __exit__(self, *exc: object) -> None:
        self.cursor.close()
        self.conn.rollback()


class MysqlDialect(SqlDialect):
    """PyMySQL, an unbuffered cursor per poll."""

    def connect(self, dsn: str) -> Any:
        # optional driver (extras "connectors", "destinations"): only the one in use loads
        import pymysql  # noqa: PLC0415

        url = urlsplit(dsn)
        return pymysql.connect(
            host=url.hostname or "127.0.0.1",
            port=url.port or 3306,
            user=unquote(url.username or "root"),
            password=unquote(url.password or ""),
            database=url.path.lstrip("/") or None,
            charset="utf8mb4",
            autocommit=False,
            # TIMESTAMP columns are read in UTC (DATETIME, zone-less, is read as UTC too).
            init_command="SET time_zone = '+00:00'",
        )

    @staticmethod
    def quote(name: str) -> str:
        """A MySQL identifier in backticks."""
        return "`" + name.replace("`", "``") + "`"

    def columns(self, conn: Any, spec: DatabaseSpec) -> list[SourceColumn]:
        schema, table = _split_table(spec.source_table)
        with conn.cursor() as cur:
            cur.execute(
                "SELECT column_name, data_type, column_type, numeric_precision, numeric_scale"
                " FROM information_schema.columns"
                " WHERE table_schema = coalesce(%s, database()) AND table_name = %s"
                " ORDER BY ordinal_position",
                (schema, table),
            )
            rows = cur.fetchall()
            # MariaDB's JSON is LONGTEXT with a json_valid() check: find those columns.
            cur.execute(
                "SELECT check_clause FROM information_schema.check_constraints"
                " WHERE constraint_schema = coalesce(%s, database()) AND table_name = %s",
                (schema, table),
            )
            checked = {str(c).strip() for (c,) in cur.fetchall()}
        conn.rollback()
        return [
            SourceColumn(
                "mysql",
                str(n),
                "json" if f"json_valid({self.quote(str(n))})" in checked else str(t).lower(),
                str(u),
                None if p is None else int(p),
                None if s is None else int(s),
            )
            for n, t, u, p, s in rows
        ]

    def stream(
        self, conn: Any, spec: DatabaseSpec, columns: Sequence[str], since: Any
    ) -> AbstractContextManager[Iterator[dict[str, Any]]]:
        # optional driver (extras "connectors", "destinations"): only the one in use loads
        import pymysql.cursors  # noqa: PLC0415

        schema, table = _split_table(spec.source_table)
        source = ".".join(self.quote(p) for p in (schema, table) if p)
        where, order = _where_order(spec, since, self.quote)
        query = f"SELECT {', '.join(self.quote(c) for c in columns)} FROM {source}"
        if where:
            query += f" WHERE {where[0]} >= %s"
        query += f" ORDER BY {', '.join(order)}"
        params = () if since is None else (since,)
        return _Stream(conn, conn.cursor(pymysql.cursors.SSDictCursor), query, params)


def _cursor_out(value: Any) -> Any:
    """A cursor value as stored in the cursor document."""
    if isinstance(value, dt.datetime | dt.date):
        return {"time": value.isoformat()}
    return json_value(value)


def _cursor_in(stored: Any, lookback: float) -> Any:
    """The value to read from: the stored cursor minus ``lookback``."""
    if isinstance(stored, dict):
        mark = dt.datetime.fromisoformat(stored["time"])
        return mark - dt.timedelta(seconds=lookback)
    return stored - lookback if lookback else stored


class DatabaseSource(Source, Generic[S]):
    """A table read by cursor or by diff (see the module docstring)."""

    def __init__(self, spec: S, dialect: Dialect[S]) -> None:
        self.spec = spec
        self.dialect = dialect
        self._conn: Any = None
        self._columns: list[SourceColumn] | None = None
        self._warned: set[str] = set()

    async def _connection(self) -> Any:
        if self._conn is None:
            self._conn = await asyncio.to_thread(self.dialect.open, self.spec)
        return self._conn

    async def _source_columns(self) -> list[SourceColumn]:
        conn = await self._connection()
        found = await asyncio.to_thread(self.dialect.columns, conn, self.spec)
        what = repr(self.spec.source_table) if self.spec.source_table else "the query"
        if not found:
            raise ConfigError(f"source table {what} not found")
        wanted = self.spec.columns or [c.name for c in found]
        by_name = {c.name: c for c in found}
        missing = [c for c in {*wanted, *self.spec.key} if c not in by_name]
        if missing:
            raise ConfigError(f"{what} has no column {sorted(missing)}")
        return [by_name[c] for c in dict.fromkeys([*self.spec.key, *wanted])]

    async def schemas(self) -> Sequence[TableSchema]:
        """The gateway table, typed from the source's column types (key columns included;
        see :mod:`lakesync.connectors._types`)."""
        self._columns = await self._source_columns()
        return [source_schema(self.spec.table, self._columns, self._warned)]

    async def aclose(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            await asyncio.to_thread(self._conn.close)
            self._conn = None

    async def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
        """One poll by the configured strategy."""
        found = self._columns or await self._source_columns()
        columns = [c.name for c in found]
        conn = await self._connection()
        diff = self.spec.strategy == "diff"
        since = None
        if not diff and "cursor" in cursor:
            since = _cursor_in(cursor["cursor"], self.spec.lookback)
        stream = self.dialect.stream(conn, self.spec, columns, since)
        seen = SpilledKeys() if diff else None
        state = dict(cursor)
        try:
            async with contextlib.aclosing(self._chunks(stream, columns, state, seen)) as chunks:
                async for chunk in chunks:
                    yield chunk
            if seen is not None:
                yield Chunk(self.spec.table, keep_only=seen)
        finally:
            if seen is not None:
                seen.close()

    async def _chunks(
        self,
        stream: AbstractContextManager[Iterator[dict[str, Any]]],
        columns: Sequence[str],
        state: dict[str, Any],
        seen: SpilledKeys | None,
    ) -> AsyncGenerator[Chunk, None]:
        """The streamed rows in chunks (the driver's values: the poller encodes them for their
        columns): cursor chunks carry the cursor, diff chunks' ids go to ``seen``. The read
        transaction ends with the stream."""
        rows = await asyncio.to_thread(stream.__enter__)
        try:
            while batch := await asyncio.to_thread(_take, rows, self.spec.chunk_rows):
                chunk = Chunk(self.spec.table)
                for row in batch:
                    chunk.upserts[row_id_of(row, self.spec.key)] = {c: row[c] for c in columns}
                if seen is None:
                    state["cursor"] = _cursor_out(batch[-1][self.spec.cursor_column])
                    chunk.cursor = dict(state)
                else:
                    seen.add(chunk.upserts)
                yield chunk
        finally:
            await asyncio.to_thread(stream.__exit__, None, None, None)


def _take(rows: Iterator[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        out.append(row)
        if len(out) == n:
            break
    return out
