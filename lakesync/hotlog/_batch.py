"""Store-independent parts of an append: dedup within the batch and merge into row states."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.base import RowKey
from lakesync.merge import RowState, join_delta

__all__ = [
    "copy_states",
    "fresh_deltas",
    "history_of",
    "merge_into",
    "next_ingest",
    "touched_keys",
]


def fresh_deltas(deltas: Sequence[RowDelta], known: Collection[str]) -> list[RowDelta]:
    """The deltas whose deltaId is neither ``known`` nor repeated earlier in the batch."""
    seen: set[str] = set(known)
    out: list[RowDelta] = []
    for d in deltas:
        if d.delta_id not in seen:
            seen.add(d.delta_id)
            out.append(d)
    return out


def touched_keys(deltas: Sequence[RowDelta]) -> list[RowKey]:
    """The distinct ``(table, row_id)`` keys of a batch, in first-seen order."""
    return list(dict.fromkeys((d.table, d.row_id) for d in deltas))


def merge_into(states: dict[RowKey, RowState], deltas: Sequence[RowDelta]) -> None:
    """Join every delta into its row's state (creating missing rows) with the core merge."""
    for d in deltas:
        key = (d.table, d.row_id)
        row = states.get(key)
        if row is None:
            row = states[key] = RowState()
        join_delta(row, d)


def copy_states(states: dict[RowKey, RowState], keys: Sequence[RowKey]) -> dict[RowKey, RowState]:
    """Independent copies of the states of ``keys`` (an empty state for a missing row); the merge
    replaces cells rather than mutating them, so copying the dict suffices."""
    out: dict[RowKey, RowState] = {}
    for key in keys:
        s = states.get(key)
        out[key] = RowState() if s is None else RowState(dict(s.cells), s.write, s.tombstone)
    return out


def history_of(
    rows: Sequence[tuple[int, int, RowDelta]], since: int, base: RowState | None = None
) -> tuple[RowState, list[tuple[int, RowDelta]]]:
    """A row's state at ingest ``since`` and its later deltas, from ``(ingest, batch end,
    delta)`` triples in ingest order on top of ``base`` (the state of its earlier, trimmed
    deltas). Each later delta comes with the ingest HLC of the end of its push batch: the row's
    states inside one atomic batch were never visible to anyone."""
    state = RowState() if base is None else base
    later: list[tuple[int, RowDelta]] = []
    for ingest, end, d in rows:
        if ingest <= since:
            join_delta(state, d)
        else:
            later.append((end, d))
    return state, later


def next_ingest(clock: HLC, last_stored: int) -> int:
    """The first ingest HLC of a new batch: the clock's next tick, but above the stored head so
    ingest order stays strictly increasing even across processes with skewed clocks."""
    return max(clock.now(), last_stored + 1)
