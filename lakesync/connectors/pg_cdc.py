"""PostgreSQL change capture: a logical replication slot decoded with ``test_decoding``.

The source creates its slot on the first poll (it needs ``wal_level = logical`` and a role with
REPLICATION; a server without it is a :class:`~lakesync.errors.ConfigError` saying so), then
loads each table once (the slot keeps every change made from its creation on, so nothing in
between is lost; a change read both ways lands twice and settles on the latest). Each poll
peeks at most ``chunk_rows`` changes, pushes them and then advances the slot past them: the slot
is the cursor, kept by the database. A crash between the push and the advance re-reads those
changes, which then change nothing. Deletes arrive as changes (the replica identity, by default
the primary key), so no snapshot diff is needed; ``TRUNCATE`` is not followed (it is logged).

An unused slot keeps WAL on the server: drop it (``SELECT pg_drop_replication_slot('…')``) when
the connector is removed for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from lakesync.connector_specs import DatabaseSpec, PostgresCdcSpec
from lakesync.connectors._changes import Chunk
from lakesync.connectors._decoding import parse_change
from lakesync.connectors._paging import PageGuard
from lakesync.connectors.base import Source
from lakesync.connectors.database import DatabaseSource, PostgresDialect, row_id_of, source_schema
from lakesync.errors import ConfigError
from lakesync.schema import TableSchema

__all__ = ["PostgresCdcSource"]

_log = logging.getLogger("lakesync.connectors")


class PostgresCdcSource(Source):
    """Changes of ``spec.tables`` from the slot ``spec.slot`` (see the module docstring)."""

    def __init__(self, spec: PostgresCdcSpec) -> None:
        self.spec = spec
        self.dialect = PostgresDialect()
        self._conn: Any = None
        self._keys: dict[str, list[str]] = {}
        self._warned: set[str] = set()

    async def _sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        def run() -> list[tuple[Any, ...]]:
            if self._conn is None:
                self._conn = self.dialect.connect(self.spec.dsn)
                self._conn.autocommit = True
            rows: list[tuple[Any, ...]] = self._conn.execute(query, params).fetchall()
            return rows

        return await asyncio.to_thread(run)

    def _qualified(self, source: str) -> str:
        return source if "." in source else f"public.{source}"

    async def schemas(self) -> Sequence[TableSchema]:
        """One gateway table per source table, typed from ``information_schema`` as the
        ``postgres`` connector types it (:mod:`lakesync.connectors._types`); the primary key of
        each becomes its row id."""
        out = []
        for source, table in self.spec.tables.items():
            name = self._qualified(source)
            schema_name, _, table_name = name.partition(".")
            await self._sql("SELECT 1")  # connects
            columns = await asyncio.to_thread(
                PostgresDialect.table_columns, self._conn, schema_name, table_name
            )
            if not columns:
                raise ConfigError(f"source table {name!r} not found")
            keys = await self._sql(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
                " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
                " ORDER BY array_position(i.indkey, a.attnum)",
                (name,),
            )
            if not keys:
                raise ConfigError(f"{name!r} has no primary key: change capture needs one")
            self._keys[name] = [str(k) for (k,) in keys]
            out.append(source_schema(table, columns, self._warned))
        return out

    async def _ensure_slot(self) -> bool:
        """Create the slot if missing; True when it was created (a first load is due)."""
        [(level,)] = await self._sql("SHOW wal_level")
        if level != "logical":
            raise ConfigError(
                f"change capture needs wal_level = logical, the server runs {level!r}: "
                "ALTER SYSTEM SET wal_level = logical and restart PostgreSQL"
            )
        found = await self._sql(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.spec.slot,)
        )
        if found:
            return False
        await self._sql(
            "SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (self.spec.slot,)
        )
        return True

    async def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
        """The first load when due, then the slot's changes in chunks."""
        if not self._keys:
            await self.schemas()
        if await self._ensure_slot() or not cursor.get("loaded"):
            async for chunk in self._load():
                yield chunk
            yield Chunk(next(iter(self.spec.tables.values())), cursor={"loaded": True})
        guard = PageGuard(f"replication slot {self.spec.slot}")
        while True:
            rows = await self._sql(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_changes(%s, NULL, %s,"
                " 'include-xids', '0', 'skip-empty-xacts', '1')",
                (self.spec.slot, self.spec.chunk_rows),
            )
            if not rows:
                return
            # The slot must move on after each batch: the same last position twice is a loop.
            guard.follow(rows[-1][0])
            for chunk in self._chunks([str(d) for _, d in rows]):
                yield chunk
            # Pushed: move the slot on (a crash before this re-reads them, harmlessly).
            await self._sql(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.spec.slot, rows[-1][0])
            )
            if len(rows) < self.spec.chunk_rows:
                return

    def _chunks(self, lines: Sequence[str]) -> list[Chunk]:
        """Consecutive changes of one table form a chunk (order across tables is kept)."""
        out: list[Chunk] = []
        for line in lines:
            change = parse_change(line)
            if change is None:
                continue
            name = f"{change.schema}.{change.table}"
            table = self.spec.tables.get(name) or self.spec.tables.get(change.table)
            if table is None:
                continue
            if change.op == "TRUNCATE":
                _log.warning(
                    "connector slot %s: TRUNCATE of %s is not followed", self.spec.slot, name
                )
                continue
            if not out or out[-1].table != table:
                out.append(Chunk(table))
            chunk, keys = out[-1], self._keys[name]
            if change.old:
                old_id = row_id_of(change.old, keys)
                chunk.upserts.pop(old_id, None)
                chunk.deletes.append(old_id)
            if change.new:
                rid = row_id_of(change.new, keys)
                if rid in chunk.deletes:
                    chunk.deletes.remove(rid)
                chunk.upserts[rid] = chunk.upserts.get(rid, {}) | change.new
        return out

    async def _load(self) -> AsyncGenerator[Chunk, None]:
        """Every row of every table, read as the diff strategy reads a table."""
        for source, table in self.spec.tables.items():
            name = self._qualified(source)
            spec = DatabaseSpec(
                gateway=self.spec.gateway,
                dsn=self.spec.dsn,
                source_table=name,
                table=table,
                key=self._keys[name],
                chunk_rows=self.spec.chunk_rows,
                strategy="diff",
            )
            loader = DatabaseSource(spec, self.dialect)
            try:
                async with contextlib.aclosing(loader.poll({})) as chunks:
                    async for chunk in chunks:
                        chunk.cursor = None  # the slot, not a key list, is this source's cursor
                        yield chunk
            finally:
                await loader.aclose()

    async def aclose(self) -> None:
        """Close the connection (the slot stays: it is the cursor)."""
        if self._conn is not None:
            await asyncio.to_thread(self._conn.close)
            self._conn = None
