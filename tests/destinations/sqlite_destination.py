"""A destination kind that lives only in the tests: a SQLite file, written against the
:class:`~lakesync.destinations.base.Destination` interface alone.

It shows what a new destination needs: nothing in ``lakesync/lakehouse`` changes; shipping
reaches it through :meth:`Destination.apply_change_set` (here the interface's default, which
brings the change set to the Spark driver and calls :meth:`apply_changes`). It runs the same
behaviour suite as the real destinations (``tests/destinations/conftest.py`` adds it to
``KINDS``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import (
    Change,
    Destination,
    DestinationError,
    TieringMark,
    eviction_batches,
    latest_per_row,
    normalise_row,
)
from lakesync.destinations.statements import Columns, TableLayout

# SQLite has no decimal, time or date type: those are kept as their canonical text.
_TYPES = {"string": "TEXT", "number": "REAL", "boolean": "INTEGER", "json": "TEXT", "null": "TEXT",
          "integer": "INTEGER", "decimal": "TEXT", "timestamp": "TEXT", "date": "TEXT",
          "bytes": "BLOB"}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


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
        have = {r[1] for r in self._db.execute(f"pragma table_info({_q(layout.table)})")}
        if not have:
            self._db.execute(f"create table {_q(layout.table)} (row_id text primary key, "
                             "props text not null default '{}', synced_at text not null, "
                             "deleted_at text)")
        for c in layout.columns:
            if c.name not in have:
                self._db.execute(f"alter table {_q(layout.table)} add column {_q(c.name)} "
                                 f"{_TYPES[c.type]}")

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
                if c.type in ("timestamp", "date") and row[c.name] is not None:
                    parse = datetime if c.type == "timestamp" else date
                    row[c.name] = parse.fromisoformat(row[c.name])
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
