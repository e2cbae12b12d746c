"""Table schemas of the replica: declared ones, and columns learned from remote deltas."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from operator import attrgetter

import msgspec

from lakesync.client._columns import (
    SQL_TYPES,
    decode_json,
    encode_json,
    infer_type,
)
from lakesync.client._replica import _PREFIX, ReplicaFile
from lakesync.client._sql import add_column, create_table, drop_column
from lakesync.column_types import widening_allowed
from lakesync.delta import RowDelta
from lakesync.errors import SchemaError
from lakesync.schema import (
    ColumnSpec,
    TableSchema,
    evolve,
    parse_schema,
    schema_to_wire,
)

_log = logging.getLogger(__name__)
_column = attrgetter("column")


def _shape(delta: RowDelta) -> tuple[str, tuple[str, ...]]:
    """The table and column names of a delta (a page repeats a few shapes thousands of times)."""
    return delta.table, tuple(map(_column, delta.columns))


class ReplicaSchemas:
    """The replica's tables: their schemas, versions and SQL tables. ``refill`` writes every
    visible row of a table to its SQL table again (after a column was widened: the rows' part
    does it)."""

    def __init__(
        self, file: ReplicaFile, refill: Callable[[sqlite3.Connection, str], None]
    ) -> None:
        self._file = file
        self._refill = refill
        self._schemas: dict[str, TableSchema] = {}
        self._skipped: set[str] = set()
        with file.lock:
            for tbl, spec in file.conn.execute("SELECT tbl, spec FROM _ls_schemas").fetchall():
                self._schemas[tbl] = parse_schema(decode_json(spec), stored=True)

    def declare(self, schemas: Sequence[TableSchema]) -> None:
        """Declare the app's tables: new ones are created, known ones evolve additively
        (:func:`lakesync.schema.evolve`); raises :class:`SchemaError` for an incompatible one."""
        with self._file.tx() as c:
            for schema in schemas:
                self._declare(c, schema)

    # -- schemas --------------------------------------------------------------------------

    def schema(self, table: str) -> TableSchema:
        """The schema of a local table; :class:`SchemaError` if the table is unknown."""
        try:
            return self._schemas[table]
        except KeyError:
            raise SchemaError(
                f"unknown table {table!r}: pass its schema to the client (schemas=[...])"
            ) from None

    def schemas(self) -> dict[str, TableSchema]:
        """Every local table's schema."""
        return dict(self._schemas)

    def _declare(self, c: sqlite3.Connection, schema: TableSchema) -> None:
        if schema.table.startswith(_PREFIX):
            raise SchemaError(f"table names starting with {_PREFIX!r} are reserved by the client")
        old = self._schemas.get(schema.table)
        if old is None:
            clash = [t for t in self._schemas if t.lower() == schema.table.lower()]
            if clash:
                raise SchemaError(
                    f"table {schema.table!r} differs from local table {clash[0]!r} only in case; "
                    "SQLite table names are case-insensitive"
                )
            columns = [(s.name, SQL_TYPES[s.type]) for s in schema.columns]
            c.execute(create_table(schema.table, columns))
            self._store_schema(c, schema, 1)
            return
        # Columns learned from remote deltas stay even when the app's schema omits them.
        declared = {s.name for s in schema.columns}
        kept = [s for s in old.columns if s.name not in declared]
        merged = TableSchema(
            schema.table,
            [*schema.columns, *kept],
            schema.primary_key,
            schema.soft_delete,
            schema.external_id_column,
        )
        evolve(old, merged)
        added = [s for s in merged.columns if s.name not in old.column_types()]
        existing = {"row_id", *(name.lower() for name in old.column_types())}
        for spec in added:
            if spec.name.lower() in existing:
                raise SchemaError(
                    f"column {spec.name!r} of {schema.table!r} differs from an existing column "
                    "only in case; SQLite column names are case-insensitive"
                )
        # A widened column (evolve allowed it) holds its values in another SQLite form: it is
        # re-created and the table's rows are written again from their merge states.
        before = old.column_specs()
        widened = [
            s
            for s in merged.columns
            if s.name in before
            and msgspec.structs.replace(before[s.name], nullable=s.nullable) != s
        ]
        if added or schema_to_wire(merged) != schema_to_wire(old):
            for s in widened:
                c.execute(drop_column(schema.table, s.name))
            for s in [*widened, *added]:
                c.execute(add_column(schema.table, s.name, SQL_TYPES[s.type]))
            version = c.execute(
                "SELECT version FROM _ls_schemas WHERE tbl = ?", (schema.table,)
            ).fetchone()[0]
            self._store_schema(c, merged, int(version) + 1)
            if widened:
                self._refill(c, schema.table)

    def adopt(self, schemas: Sequence[TableSchema]) -> None:
        """Take the gateway's schemas (docs/protocol.md §10), so pulled rows of its typed
        columns are held as their types: a table this replica lacks is declared as the gateway
        has it; a local table gains the columns it lacks (nullable: its rows have no value for
        them) and widens the columns the gateway widened. A local column the gateway types
        otherwise keeps its local type (a logged warning): the app's declaration wins here, and
        the gateway refuses what does not fit its own."""
        with self._file.tx() as c:
            for schema in schemas:
                local = self._schemas.get(schema.table)
                try:
                    if local is None:
                        folded = schema.table.lower()
                        if folded.startswith(_PREFIX) or any(
                            t.lower() == folded for t in self._schemas
                        ):
                            _log.warning(
                                "ignoring the gateway's table %r: its name is taken locally",
                                schema.table,
                            )
                            continue
                        self._declare(c, schema)
                    else:
                        self._declare(c, self._with_gateway_columns(local, schema))
                except SchemaError as exc:
                    _log.warning("keeping local table %r as it is: %s", schema.table, exc.message)

    def unknown(self, deltas: Sequence[RowDelta]) -> set[tuple[str, str]]:
        """The ``(table, column)`` pairs ``deltas`` name that no local schema has (column
        ``""`` for a table this replica lacks), names compared case-insensitively."""
        out: set[tuple[str, str]] = set()
        seen: set[tuple[str, tuple[str, ...]]] = set()
        for d in deltas:
            shape = _shape(d)
            if shape in seen:
                continue  # a page repeats few shapes
            seen.add(shape)
            schema = self._schemas.get(d.table)
            if schema is None:
                out.add((d.table, ""))
                continue
            have = {name.lower() for name in schema.column_types()}
            out.update((d.table, c) for c in shape[1] if c.lower() not in have)
        return out

    @staticmethod
    def _with_gateway_columns(local: TableSchema, gateway: TableSchema) -> TableSchema:
        theirs = {s.name.lower(): s for s in gateway.columns}
        columns: list[ColumnSpec] = []
        for spec in local.columns:
            other = theirs.pop(spec.name.lower(), None)
            if other is None or other.name != spec.name or other == spec:
                columns.append(spec)
            elif (why := widening_allowed(spec, other)) is None:
                columns.append(other)
            else:
                columns.append(spec)
                _log.warning("table %r: keeping the local column type: %s", local.table, why)
        columns += [msgspec.structs.replace(s, nullable=True) for s in theirs.values()]
        return msgspec.structs.replace(local, columns=columns)

    def _store_schema(self, c: sqlite3.Connection, schema: TableSchema, version: int) -> None:
        c.execute(
            "INSERT INTO _ls_schemas (tbl, version, spec, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(tbl) DO UPDATE SET version = excluded.version, spec = excluded.spec, "
            "updated_at = excluded.updated_at",
            (schema.table, version, encode_json(schema_to_wire(schema)), time.time()),
        )
        self._schemas[schema.table] = schema

    def learn_all(self, c: sqlite3.Connection, deltas: Sequence[RowDelta]) -> list[RowDelta]:
        """The deltas this replica can hold, after making room for them (:meth:`_learn`). Deltas
        naming the same table and columns get the same answer, so each such shape is learnt
        once per batch (a checkpoint frame repeats a few shapes thousands of times)."""
        kept: list[RowDelta] = []
        shapes: dict[tuple[str, tuple[str, ...]], bool] = {}
        for d in deltas:
            shape = _shape(d)
            ok = shapes.get(shape)
            if ok is None:
                ok = shapes[shape] = self._learn(c, d)
            if ok:
                kept.append(d)
        return kept

    def _learn(self, c: sqlite3.Connection, delta: RowDelta) -> bool:
        """Make room for a remote delta naming a table or columns this replica lacks.

        Returns False for a delta this replica cannot hold: a table whose name is reserved
        here or differs from a local table only in case (SQLite names are case-insensitive).
        A column that collides the same way keeps its clock and value in ``_ls_cells`` but
        gets no SQL column, so it never blocks the page.
        """
        old = self._schemas.get(delta.table)
        if old is None:
            folded = delta.table.lower()
            if folded.startswith(_PREFIX) or any(t.lower() == folded for t in self._schemas):
                if delta.table not in self._skipped:
                    self._skipped.add(delta.table)
                    _log.warning("ignoring remote table %r: its name is taken locally", delta.table)
                return False
        known = old.column_types() if old is not None else {}
        taken = {"row_id", *(name.lower() for name in known)}
        new_cols: list[ColumnSpec] = []
        for cv in delta.columns:
            if cv.column.lower() not in taken:
                taken.add(cv.column.lower())
                new_cols.append(ColumnSpec(cv.column, infer_type(cv.value)))
        if old is None:
            self._declare(c, TableSchema(delta.table, new_cols))
        elif new_cols:
            self._declare(
                c,
                TableSchema(
                    old.table,
                    [*old.columns, *new_cols],
                    old.primary_key,
                    old.soft_delete,
                    old.external_id_column,
                ),
            )
        return True
