"""A destination kind that lives only in the tests: a SQLite file, written against the
:class:`~lakesync.destinations.base.Destination` interface alone.

It shows what a new destination needs: nothing in ``lakesync/lakehouse`` changes; shipping
reaches it through :meth:`Destination.ship` (the interface's default, which reads the watermark
and applies the lake's change set with :meth:`Destination.apply_change_set`: here the
interface's default too, which brings it to the Spark driver and calls :meth:`apply_changes`).
It runs the same behaviour suite as the real destinations (``tests/destinations/conftest.py``
adds it to ``KINDS``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from lakesync.column_types import decimal_params
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import (
    Change,
    Destination,
    DestinationError,
    TieringMark,
    eviction_batches,
    latest_per_row,
    normalise_row,
    widened_value,
)
from lakesync.destinations.statements import Columns, TableLayout
from lakesync.schema import ColumnSpec

# SQLite has no decimal, time or date type: those are kept as their canonical text. Each
# declared type names the column type (so a widening is seen) and gives the storage class
# SQLite picks from its name: INT → integer, TEXT → text, REAL → real, BLOB → as given.
_TYPES = {"string": "TEXT", "number": "REAL", "boolean": "BOOLEAN_INT", "json": "JSON_TEXT",
          "null": "NULL_TEXT", "integer": "INTEGER", "timestamp": "TIMESTAMP_TEXT",
          "date": "DATE_TEXT", "bytes": "BLOB"}
_SPECS = {v: k for k, v in _TYPES.items()}


def _declared(spec: ColumnSpec) -> str:
    if spec.type == "decimal":
        return "DECIMAL_TEXT_{}_{}".format(*decimal_params(spec))
    return _TYPES[spec.type]


def _spec_of(name: str, declared: str) -> ColumnSpec:
    if declared.startswith("DECIMAL_TEXT_"):
        precision, scale = declared.removeprefix("DECIMAL_TEXT_").split("_")
        return ColumnSpec(name, "decimal", int(precision), int(scale))
    return ColumnSpec(name, _SPECS.get(declared, "string"))  # type: ignore[arg-type]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _typed(spec: ColumnSpec, value: Any) -> Any:
    """A stored value as the column's typed value (times and dates parsed, booleans)."""
    if value is None:
        return None
    if spec.type in ("timestamp", "date"):
        return (datetime if spec.type == "timestamp" else date).fromisoformat(value)
    if spec.type == "boolean":
        return bool(value)
    if spec.type == "decimal":
        return Decimal(value)
    return value


def _stored(value: Any) -> Any:
    """A typed value as this SQLite table keeps it (decimals, times and dates as text)."""
    if isinstance(value, datetime):
        return _stamp(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, date):
        return value.isoformat()
    return value


class SqliteDestination(Destination):
    """The docs/protocol.md §11 layout in one SQLite file: the table, the watermark and tiering
    tables."""

    def __init__(self, spec: DestinationSpec, path: str) -> None:
        self.spec = spec
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("create table if not exists lakesync_watermarks (gateway_id text, "
                         "table_name text, position integer, primary key (gateway_id, table_name))")
        self._db.execute("create table if not exists lakesync_tiering (gateway_id text, "
                         "table_name text, cutoff text, position integer, "
                         "primary key (gateway_id, table_name))")

    def layout(self, table: str, columns: Columns,
               external_id: str | None = None) -> TableLayout:
        return TableLayout(table, columns, self.spec.delete, external_id)

    def ensure_table(self, layout: TableLayout) -> None:
        have = {r[1]: r[2] for r in self._db.execute(f"pragma table_info({_q(layout.table)})")}
        if not have:
            self._db.execute(f"create table {_q(layout.table)} (row_id text primary key, "
                             "props text not null default '{}', synced_at text not null, "
                             "deleted_at text)")
        for c in layout.columns:
            if c.name not in have:
                self._db.execute(f"alter table {_q(layout.table)} add column {_q(c.name)} "
                                 f"{_declared(c)}")
            elif have[c.name] != _declared(c):
                self._widen(layout, _spec_of(c.name, have[c.name]), c)

    def _widen(self, layout: TableLayout, old: ColumnSpec, new: ColumnSpec) -> None:
        """SQLite changes no column's type: a new column gets the widened values
        (``widened_value``) and replaces the old one."""
        table, temp = _q(layout.table), _q(new.name + "__widened")
        self._db.execute("begin")
        self._db.execute(f"alter table {table} add column {temp} {_declared(new)}")
        for row_id, value in self._db.execute(f"select row_id, {_q(new.name)} from {table}"
                                              ).fetchall():
            typed = _typed(old, value)
            self._db.execute(f"update {table} set {temp} = ? where row_id = ?",
                             (_stored(widened_value(old, new, typed)), row_id))
        self._db.execute(f"alter table {table} drop column {_q(new.name)}")
        self._db.execute(f"alter table {table} rename column {temp} to {_q(new.name)}")
        self._db.execute("commit")

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        now = _stamp(datetime.now(UTC))
        names = layout.column_names
        try:
            self._db.execute("begin")
            for change in latest_per_row(changes):
                for c in layout.columns:
                    value = change.values.get(c.name)
                    if c.type == "json" and value is not None:
                        json.loads(value)  # refuse what is not JSON, as the others do
                if change.deleted:
                    if layout.delete == "soft":
                        self._db.execute(
                            f"update {_q(layout.table)} set deleted_at = ?, synced_at = ? "
                            "where row_id = ?", (now, now, change.row_id))
                    else:
                        self._db.execute(f"delete from {_q(layout.table)} where row_id = ?",
                                         (change.row_id,))
                    continue
                cols = ", ".join(_q(n) for n in names)
                marks = ", ".join("?" for _ in names)
                sets = ", ".join(f"{_q(n)} = excluded.{_q(n)}" for n in names)
                self._db.execute(
                    f"insert into {_q(layout.table)} (row_id, synced_at, deleted_at, {cols}) "
                    f"values (?, ?, null, {marks}) on conflict (row_id) do update set "
                    f"synced_at = excluded.synced_at, deleted_at = null, {sets}",
                    (change.row_id, now, *(_stored(change.values.get(c.name))
                                           for c in layout.columns)),
                )
            if position is not None:
                self._db.execute("insert into lakesync_watermarks values (?, ?, ?) on conflict "
                                 "do update set position = excluded.position",
                                 (self.spec.gateway, layout.table, position))
            self._db.execute("commit")
        except (sqlite3.Error, ValueError) as exc:
            self._db.execute("rollback")
            raise DestinationError(
                f"destination {self.spec.name!r}: applying changes to {layout.table!r} "
                f"failed: {exc}"
            ) from None

    def _select(self, layout: TableLayout, where: str = "", params: Sequence[Any] = ()
                ) -> list[dict[str, Any]]:
        names = ["row_id", *layout.column_names, "props", "synced_at", "deleted_at"]
        cur = self._db.execute(
            f"select {', '.join(_q(n) for n in names)} from {_q(layout.table)} {where}", params
        )
        rows = []
        for found in cur.fetchall():
            row = dict(zip(names, found, strict=True))
            for stamp in ("synced_at", "deleted_at"):
                if row[stamp] is not None:
                    row[stamp] = datetime.fromisoformat(row[stamp])
            for c in layout.columns:
                row[c.name] = _typed(c, row[c.name])
            rows.append(normalise_row(layout, row))
        return rows

    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        return self._select(layout, "order by row_id")

    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        rows = self._select(layout, "where synced_at > ? order by synced_at, row_id",
                            (_stamp(since),))
        if limit is not None and len(rows) > limit:
            last = rows[limit - 1]["synced_at"]
            rows = [r for r in rows if r["synced_at"] <= last]
        return rows

    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        gone = 0
        self._db.execute("begin")
        for batch in eviction_batches(row_ids):
            ids = list(batch.values())
            marks = ", ".join("?" for _ in ids)
            gone += self._db.execute(
                f"delete from {_q(layout.table)} where row_id in ({marks})", ids
            ).rowcount
        if mark is not None:
            self._db.execute("insert into lakesync_tiering values (?, ?, ?, ?) on conflict do "
                             "update set cutoff = excluded.cutoff, position = excluded.position",
                             (self.spec.gateway, layout.table, str(mark.cutoff), mark.position))
        self._db.execute("commit")
        return gone

    def tiering_mark(self, table: str) -> TieringMark | None:
        row = self._db.execute("select cutoff, position from lakesync_tiering where gateway_id "
                               "= ? and table_name = ?", (self.spec.gateway, table)).fetchone()
        return None if row is None else TieringMark(int(row[0]), int(row[1]))

    def watermark(self, table: str) -> int | None:
        row = self._db.execute("select position from lakesync_watermarks where gateway_id = ? "
                               "and table_name = ?", (self.spec.gateway, table)).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        self._db.close()
