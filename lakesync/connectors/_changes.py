"""What a chunk of source records changes in a gateway: pure, no I/O.

A source reports what it read (records by row id, and row ids it knows are gone); the gateway
holds the merged state of those rows. Only the difference becomes deltas: a new row is an
INSERT of every column, a changed row an UPDATE of the changed columns, a gone row that is live a
DELETE, and anything already equal produces nothing. So reading a record twice (a cursor's
safety overlap, a restart that re-reads its last page) never stores a delta twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lakesync.delta import RowDelta
from lakesync.values import normalize_value

__all__ = ["Chunk", "KeySet", "changes_for", "split_rows"]


class KeySet(Protocol):
    """Row ids a source saw in a full pass (held where the source likes: a temporary file)."""

    def missing(self, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` not in the set, in their order."""


@dataclass(slots=True)
class Chunk:
    """Part of one poll of one table: ``upserts`` (row id → the row's columns as the source
    has them now), ``deletes`` (row ids gone from the source) and the source's cursor once this
    chunk is stored (None = unchanged).

    ``keep_only`` ends a full pass over ``table``: every row the gateway stores for the table
    whose id is not in it is gone from the source. The poller pages through the stored ids and
    deletes those, so neither side holds the table's ids in memory."""

    table: str
    upserts: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    cursor: dict[str, Any] | None = None
    keep_only: KeySet | None = None

    def row_ids(self) -> list[str]:
        """Every row id the chunk touches."""
        return [*self.upserts, *self.deletes]


def changes_for(
    chunk: Chunk,
    current: Mapping[str, Mapping[str, Any] | None],
    client_id: str,
    next_hlc: Callable[[], int],
) -> list[RowDelta]:
    """The deltas that bring the rows of ``chunk`` from ``current`` (row id → visible columns,
    None or missing = absent) to what the source holds, one ``next_hlc()`` per delta."""
    out: list[RowDelta] = []
    for row_id, values in chunk.upserts.items():
        row = {k: normalize_value(v) for k, v in values.items()}
        now = current.get(row_id)
        if now is None:
            out.append(RowDelta.create("INSERT", chunk.table, row_id, client_id, row, next_hlc()))
            continue
        changed = {k: v for k, v in row.items() if not _same(now.get(k), v)}
        if changed:
            out.append(
                RowDelta.create("UPDATE", chunk.table, row_id, client_id, changed, next_hlc())
            )
    out.extend(
        RowDelta.create("DELETE", chunk.table, row_id, client_id, {}, next_hlc())
        for row_id in dict.fromkeys(chunk.deletes)
        if row_id not in chunk.upserts and current.get(row_id) is not None
    )
    return out


def _same(a: Any, b: Any) -> bool:
    # 1 == True in Python; a boolean column turning into a number is a change.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def split_rows(
    rows: Mapping[str, dict[str, Any]], size: int
) -> Iterator[dict[str, dict[str, Any]]]:
    """``rows`` in dicts of at most ``size`` entries, in order."""
    items = list(rows.items())
    for i in range(0, len(items), size):
        yield dict(items[i : i + size])
