"""What a client may see and write under sync rules (SPEC §8): pure functions, no I/O.

**Reads.** Rules are evaluated on a row's *merged* state. A gateway that has never had sync rules
delivers the raw log deltas. Once a gateway has had rules, every row a pulled log entry touches is
delivered as a *row snapshot* computed from its current merged state:

- visible now: ``DELETE`` then ``INSERT`` of every visible column;
- not visible now (filtered out or deleted): ``DELETE``, but only if the client may hold the
  row: it was visible at the client's cursor or after a later delta, or the client wrote a
  later delta itself (``history``); a row the client never saw is not mentioned at all.

Both are stamped with the snapshot base ``B = max(ingest HLC of the row's last delta, view stamp)``
where the view stamp is the ingest stamp of the last change of the rules or of the client's
claims. The DELETE carries clock ``(B, SNAPSHOT_DELETE_CLIENT)`` and the INSERT
``(B, SNAPSHOT_WRITE_CLIENT)``, which sorts just above it, so under the core column-LWW merge the
pair replaces whatever the client held for the row with exactly the row's current visible
columns: every real write of the row has an HLC below its ingest stamp and so below ``B``, and
every earlier snapshot of the row has a smaller base. A DELETE alone makes the row absent. The
delivery is stateless and idempotent (a lost or repeated response is harmless, ``since=0``
rebuilds a fresh replica), and a rules or claims change (a stamp newer than the client's cursor)
triggers one full resync of every row. Hence after a full pull a client's replica equals
``filter(rules, claims, global state)``. Known cost: the one resync after a rules or claims
change sends a DELETE for every row invisible under the new view (table and rowId, no values),
since the gateway keeps no per-client record of what each replica held; so does a page whose
row history is too long to replay (see ``SyncService``). Paging: ``limit`` counts log entries,
so a snapshot page holds at most ``2 * limit`` deltas; a resync answers in one response
(``hasMore`` false) whatever the limit. Snapshot deltas come from the reserved client ids
``lakesync-gateway-0`` / ``lakesync-gateway-1`` with valid deltaIds, so any SPEC client applies
them as ordinary deltas.

**Writes.** A client may push to a table only if some bucket of the rules names that table (or
lists no tables): ``lakesync.rules.tables_for``. It may change an existing live row only if that
row is visible to it now; creating a row, or reviving a deleted one, is allowed, and a client
may give a row away (change its filter column), which makes it leave its own view. The check
reads the rows just before the append, so a concurrent push to the same row can race it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from api.store.base import LogEntry, RowKey, RowRecord
from lakesync.canonical import canonical_json
from lakesync.delta import RowDelta
from lakesync.errors import ForbiddenError
from lakesync.merge import RowState, apply_delta
from lakesync.rules import SyncRules, tables_for, visible

__all__ = [
    "SNAPSHOT_DELETE_CLIENT",
    "SNAPSHOT_WRITE_CLIENT",
    "RowHistory",
    "SnapshotCache",
    "check_write",
    "claims_hash",
    "effective_rules",
    "page_view",
    "resync_view",
    "row_snapshot",
]

SNAPSHOT_DELETE_CLIENT = "lakesync-gateway-0"
SNAPSHOT_WRITE_CLIENT = "lakesync-gateway-1"

RowHistory = Mapping[RowKey, tuple[RowState, Sequence[RowDelta]]]
"""Per row: its merged state at the client's cursor and its deltas after it, in ingest order."""


def effective_rules(rules: SyncRules | None, claims: Mapping[str, Any]) -> SyncRules | None:
    """The rules that apply to a token: none for the ``admin`` role, which sees everything."""
    return None if claims.get("role") == "admin" else rules


def claims_hash(claims: Mapping[str, Any]) -> str:
    """A stable fingerprint of the claims that decide visibility (a change forces a resync)."""
    return hashlib.sha256(canonical_json(dict(claims)).encode()).hexdigest()


def row_snapshot(
    table: str, row_id: str, state: RowState, shown: bool, base: int
) -> list[RowDelta]:
    """The synthetic deltas that set a replica's copy of a row to its current visible state."""
    gone = RowDelta.create("DELETE", table, row_id, SNAPSHOT_DELETE_CLIENT, {}, base)
    columns = state.visible() if shown else None
    if columns is None:
        return [gone]
    return [gone, RowDelta.create("INSERT", table, row_id, SNAPSHOT_WRITE_CLIENT, columns, base)]


class SnapshotCache:
    """A bounded memo of row snapshots for one gateway of one store.

    Within a store a row's last ingest HLC identifies its merged state, so
    ``(table, row_id, last_ingest, base, shown)`` determines the snapshot; many clients pulling
    (or receiving broadcasts of) the same rows then share one deltaId computation.
    """

    def __init__(self, size: int = 65_536) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str, int, int, bool], list[RowDelta]] = OrderedDict()

    def snapshot(self, key: RowKey, rec: RowRecord, shown: bool, base: int) -> list[RowDelta]:
        """The memoised :func:`row_snapshot` of a row record."""
        memo = (key[0], key[1], rec.last_ingest, base, shown)
        found = self._items.get(memo)
        if found is None:
            found = row_snapshot(key[0], key[1], rec.state, shown, base)
            self._items[memo] = found
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        return found


def may_hold(
    key: RowKey,
    rules: SyncRules | None,
    claims: Mapping[str, Any],
    history: RowHistory | None,
) -> bool:
    """Whether a client may hold a row that is invisible to it now: it was visible at the
    client's cursor or after one of the later deltas, or the client wrote one of those deltas
    (its replica applied its own write); with an unknown history, assume it may."""
    if history is None or key not in history:
        return True
    start, later = history[key]
    if any(d.client_id == claims.get("sub") for d in later):
        return True
    state = RowState(dict(start.cells), start.write, start.tombstone)
    if visible(rules, claims, key[0], state.visible()):
        return True
    for d in later:
        apply_delta(state, d)
        if visible(rules, claims, key[0], state.visible()):
            return True
    return False


def _snapshots(
    keys: Iterable[RowKey],
    rows: Mapping[RowKey, RowRecord],
    rules: SyncRules | None,
    claims: Mapping[str, Any],
    stamp: int,
    cache: SnapshotCache | None,
    history: RowHistory | None = None,
) -> list[RowDelta]:
    out: list[RowDelta] = []
    for key in keys:
        rec = rows.get(key)
        if rec is None:
            continue
        table, row_id = key
        shown = visible(rules, claims, table, rec.state.visible())
        if not shown and not may_hold(key, rules, claims, history):
            continue  # never seen by this client: say nothing about it
        base = max(rec.last_ingest, stamp)
        if cache is None:
            out.extend(row_snapshot(table, row_id, rec.state, shown, base))
        else:
            out.extend(cache.snapshot(key, rec, shown, base))
    return out


def page_view(
    entries: Sequence[LogEntry],
    rows: Mapping[RowKey, RowRecord],
    rules: SyncRules | None,
    claims: Mapping[str, Any],
    stamp: int,
    raw: bool,
    cache: SnapshotCache | None = None,
    history: RowHistory | None = None,
) -> list[RowDelta]:
    """The deltas a client receives for a page of log entries (see the module docstring).

    ``raw`` (the gateway never had rules) passes the log through; otherwise each touched row
    becomes one snapshot, ordered by its last entry in the page.
    """
    if raw:
        return [e.delta for e in entries]
    last: dict[RowKey, None] = {}
    for e in entries:
        key = (e.delta.table, e.delta.row_id)
        last.pop(key, None)
        last[key] = None
    return _snapshots(last, rows, rules, claims, stamp, cache, history)


def resync_view(
    rows: Mapping[RowKey, RowRecord],
    rules: SyncRules | None,
    claims: Mapping[str, Any],
    stamp: int,
    cache: SnapshotCache | None = None,
) -> list[RowDelta]:
    """Snapshots of every row of a gateway: the full resync after a rules or claims change."""
    return _snapshots(rows, rows, rules, claims, stamp, cache)


def check_write(
    deltas: Sequence[RowDelta],
    rows: Mapping[RowKey, RowRecord],
    rules: SyncRules | None,
    claims: Mapping[str, Any],
) -> None:
    """Raise :class:`ForbiddenError` if the client may not write one of ``deltas``."""
    if rules is None:
        return
    tables = tables_for(rules, claims)
    for i, d in enumerate(deltas):
        if tables is not None and d.table not in tables:
            raise ForbiddenError(f"deltas[{i}]: the sync rules give no write access to {d.table!r}")
        rec = rows.get((d.table, d.row_id))
        if rec is None:
            continue
        current = rec.state.visible()
        if current is not None and not visible(rules, claims, d.table, current):
            raise ForbiddenError(
                f"deltas[{i}]: row {d.row_id!r} of {d.table!r} is not visible to this client"
            )
