"""Copy tables from one destination to another (``lakesync migrate``), idempotently.

Every row of the source table (soft-deleted ones as deletes) becomes a change applied to the
target with the same set-based upsert shipping uses, so running it again changes nothing and an
interrupted run is finished by running it again. ``props`` stays the target's own (sync never
writes it); the watermark is copied so shipping continues from where the source was.
"""

from __future__ import annotations

from lakesync.destinations.base import Change, Destination
from lakesync.destinations.statements import Columns

__all__ = ["migrate_table"]


def migrate_table(
    source: Destination,
    target: Destination,
    table: str,
    columns: Columns,
    external_id: str | None = None,
) -> int:
    """Copy ``table`` from ``source`` into ``target``; returns the number of rows applied."""
    src = source.layout(table, columns, external_id)
    dst = target.layout(table, columns, external_id)
    source.ensure_table(src)
    target.ensure_table(dst)
    names = src.column_names
    changes = [
        Change(row["row_id"], {n: row[n] for n in names}, deleted=True)
        if row.get("deleted_at") is not None
        else Change(row["row_id"], {n: row[n] for n in names})
        for row in source.read_rows(src)
    ]
    target.apply_changes(dst, changes, source.watermark(table))
    return len(changes)
