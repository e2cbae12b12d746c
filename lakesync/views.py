"""What a client may see and write under sync rules (docs/protocol.md §8): protocol, pure
functions, no I/O.

**Reads.** Rules are evaluated on a row's *merged* state. A gateway that has never had sync rules
delivers the raw log deltas. Once a gateway has had rules, every row a pulled log entry touches is
delivered as a *row snapshot* of its current merged state, carrying the row's **real clocks**:

- first a view eviction: a ``DELETE`` from :data:`~lakesync.delta.VIEW_EVICTION_CLIENT` at the
  snapshot base ``B = max(ingest HLC of the row's last delta, view stamp)``, which beats every
  real write of the row (those have HLCs below their ingest stamps). Our client forgets the
  row's cells and clocks entirely (a client without view evictions gets whole rows, below);
- if the row is visible: its real state, i.e. its tombstone as a ``DELETE`` at the tombstone's
  own ``(hlc, clientId)`` (if it has one), an ``INSERT`` at the row's greatest write clock with
  the cells written at that clock, and one ``UPDATE`` per other clock holding the cells that
  clock wrote (only cells newer than the tombstone: older ones read as null anyway);
- if the row is deleted and the client may hold it: its tombstone, at its real clock;
- if the row is live but filtered out and the client may hold it: the eviction alone.

A client that merges these with the core column-LWW merge (after forgetting the row) holds
exactly the row's acknowledged merged state with its real clocks, so its own pending writes,
merged on top, lose only to cells with higher clocks: an edit made offline never flickers back.
Every delta has a valid deltaId, so any v1 client applies them as ordinary deltas.

**Clients without view evictions.** A client that does not say it understands view evictions
(:data:`lakesync.wire.VIEW_EVICTIONS_FEATURE`; the TypeScript client, which applies whole rows
with last-writer-wins by HLC and keeps deletes as tombstones) would drop the real clocks sent
after an eviction: they are older than it. It gets a *whole-row snapshot* instead
(:func:`whole_row_snapshot`, ``Reader.whole_rows``): the eviction at ``B``, then, if the row is
visible, one ``INSERT`` of its whole visible state at ``B`` from
:data:`~lakesync.delta.VIEW_ENTRY_CLIENT`, which wins the tie. Both beat every real write of the
row and every earlier snapshot (``B`` grows with each), so such a client, and one that simply
applies deltas in order, holds exactly the visible row; a deleted or filtered-out row it may
hold is the eviction alone.

**Nothing outside the view.** A row invisible to the client now is mentioned (evicted) only if the
client *may hold* it: it wrote a delta of the row after its cursor, or the row was visible to it at
some point from its cursor on, under the rules and the claims in effect at that point (see
:class:`ViewHistory`, :func:`may_hold`). A fresh client (``since`` = 0) receives exactly its view,
and evictions of rows it wrote itself (it may have pushed before its first pull). So a rules or
claims change (a stamp newer than the client's cursor, which triggers one resync of every row)
evicts only rows that were visible before the change.

What is kept for this (by the store, for as long as the hot log holds its history): every
version of a gateway's rules with the stamp it took effect, and every set of claims each client
has presented with the stamp it was first seen (a claims change is rare: new team, new role).

**Relations.** A client's subqueries are bound into its claims
(:func:`lakesync.rules.bind_relations`), so a change of the rows they read is a change of its
claims, recorded as such; when only that changed since a cursor, the rows that moved are found
by index from the values that changed (:func:`relation_moves`) and a resync costs them and the
log since the cursor, not the gateway.

**Writes** are checked by :func:`lakesync.rules.write_refusal` (USING / WITH CHECK, as
PostgreSQL's row-level security), inside the append's transaction under the writers' lock.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from lakesync.canonical import canonical_json
from lakesync.delta import VIEW_ENTRY_CLIENT, VIEW_EVICTION_CLIENT, Op, RowDelta
from lakesync.merge import Clock, RowState, apply_delta
from lakesync.rules import RELATIONS_CLAIM, SyncRules, claim_values, moved_lookups, visible

__all__ = [
    "BroadcastView",
    "Reader",
    "RowHistory",
    "RowKey",
    "RowRecord",
    "SnapshotCache",
    "ViewHistory",
    "claims_hash",
    "effective_rules",
    "hidden_changed",
    "may_hold",
    "page_view",
    "relation_moves",
    "resync_view",
    "row_snapshot",
    "row_state_deltas",
    "sees",
    "view_key",
    "whole_row_snapshot",
]

V = TypeVar("V")

RowKey = tuple[str, str]
"""``(table, row_id)``."""


class RowRecord(msgspec.Struct, frozen=True, gc=False):
    """A row's merged state and the ingest HLC of the last delta that touched it (untracked by
    the cyclic GC, as :class:`~lakesync.merge.RowState` is: a gateway holds a whole view of
    them while it serves a first sync)."""

    state: RowState
    last_ingest: int


RowHistory = Mapping[RowKey, tuple[RowState, Sequence[tuple[int, RowDelta]]]]
"""Per row: its merged state at the client's cursor and its ``(ingest, delta)`` pairs after it,
in ingest order. A row left out has not changed since the cursor."""


def effective_rules(rules: SyncRules | None, claims: Mapping[str, Any]) -> SyncRules | None:
    """The rules that apply to a token: none for the ``admin`` role, which sees everything."""
    return None if claims.get("role") == "admin" else rules


def sees(rules: SyncRules | None, claims: Mapping[str, Any], table: str, state: RowState) -> bool:
    """Whether a client with ``claims`` sees a row in ``state`` under ``rules`` (admins see all)."""
    return visible(effective_rules(rules, claims), claims, table, state.visible())


def claims_hash(claims: Mapping[str, Any]) -> str:
    """A stable fingerprint of the claims that decide visibility (a change forces a resync)."""
    return hashlib.sha256(canonical_json(dict(claims)).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ViewHistory:
    """What decided a client's view from its cursor on: the rules versions and the client's
    claims versions, each as ``(stamp, value)`` in ascending stamp order, the first of each in
    effect at the cursor. No claims at a point means the client had no view there yet."""

    rules: Sequence[tuple[int, SyncRules | None]]
    claims: Sequence[tuple[int, Mapping[str, Any]]]

    @classmethod
    def fixed(cls, rules: SyncRules | None, claims: Mapping[str, Any]) -> ViewHistory:
        """A view that did not change over the window considered."""
        return cls([(0, rules)], [(0, claims)])

    def stamps(self) -> list[int]:
        """Every point where the rules or the claims changed."""
        return sorted({s for s, _ in self.rules} | {s for s, _ in self.claims})

    def sees(self, at: int, table: str, state: RowState) -> bool:
        """Whether the client saw a row in ``state`` under the view in effect at ``at``."""
        claims = _in_effect(self.claims, at)
        if claims is None:
            return False
        rules = _in_effect(self.rules, at)
        return sees(rules, claims, table, state)


def relation_moves(
    rules: SyncRules | None, history: ViewHistory
) -> list[tuple[str, list[str]]] | None:
    """Index lookups (as :func:`~lakesync.rules.lookups` makes them) whose matches include
    every row whose visibility changed over ``history`` when only the client's bound relations
    changed (one rules version; the claims versions differ only in what
    :func:`~lakesync.rules.bind_relations` resolved): the rows that moved between each version
    and the next (:func:`~lakesync.rules.moved_lookups`). None otherwise: a resync must look
    at every row."""
    if rules is None or len(history.rules) != 1:
        return None
    versions = [claims for _, claims in history.claims]
    token = [{k: v for k, v in c.items() if k != RELATIONS_CLAIM} for c in versions]
    if any(t != token[0] for t in token):
        return None
    out: list[tuple[str, list[str]]] = []
    for before, after in itertools.pairwise(versions):
        moved = moved_lookups(rules, before, after)
        if moved is None:
            return None
        out.extend(moved)
    return out


def _in_effect(versions: Sequence[tuple[int, V]], at: int) -> V | None:
    """The value of the last version that took effect at or before ``at`` (None before any)."""
    value = None
    for stamp, v in versions:
        if stamp > at:
            break
        value = v
    return value


@dataclass(frozen=True, slots=True)
class Reader:
    """One client's read: its id and claims now, the rules that apply to it now, the snapshot
    stamp (the last rules or claims change), its cursor and the view history since; for a read
    from 0, the rows the client ever wrote (it may hold those even before its first pull);
    ``whole_rows`` for a client without view evictions (it gets :func:`whole_row_snapshot`)."""

    client_id: str
    claims: Mapping[str, Any]
    rules: SyncRules | None
    stamp: int
    since: int
    history: ViewHistory
    written: frozenset[RowKey] = frozenset()
    whole_rows: bool = False


def may_hold(key: RowKey, reader: Reader, state_now: RowState, history: RowHistory) -> bool:
    """Whether a client may hold a row that is invisible to it now: it wrote a delta of the row
    after its cursor (its replica applied its own write), or the row was visible to it at its
    cursor or at any later point, under the rules and claims in effect at that point."""
    if reader.client_id in _writers(key, history):
        return True
    return any(
        reader.history.sees(at, key[0], state)
        for at, state in _states_since(key, reader.since, reader.history.stamps(), state_now,
                                       history)
    )


def _writers(key: RowKey, history: RowHistory) -> set[str]:
    """The clients that wrote a delta of the row after the cursor."""
    found = history.get(key)
    return set() if found is None else {d.client_id for _, d in found[1]}


def _states_since(
    key: RowKey, since: int, stamps: Iterable[int], state_now: RowState, history: RowHistory
) -> Iterator[tuple[int, RowState]]:
    """The row's merged state at ``since`` and at each later point where it or the view could
    have changed (each later ingest, each of ``stamps``), in order; one state object, updated
    in place between yields."""
    found = history.get(key)
    start, later = (state_now, ()) if found is None else found
    state = RowState(dict(start.cells), start.write, start.tombstone)
    points = sorted({since, *(i for i, _ in later), *stamps})
    applied = 0
    for at in points:
        if at < since:
            continue
        while applied < len(later) and later[applied][0] <= at:
            apply_delta(state, later[applied][1])
            applied += 1
        yield at, state


def _groups(state: RowState) -> list[tuple[Clock, dict[str, Any]]]:
    """The visible cells of a live row grouped by the clock that wrote them, the row's greatest
    write clock first (it may have written no visible cell), the others in descending order."""
    tomb = state.tombstone
    by_clock: dict[Clock, dict[str, Any]] = {}
    for name, cell in state.cells.items():
        if tomb is None or cell.clock > tomb:
            by_clock.setdefault(cell.clock, {})[name] = cell.value
    assert state.write is not None
    first = (state.write, by_clock.pop(state.write, {}))
    return [first, *sorted(by_clock.items(), reverse=True)]


def row_snapshot(
    table: str, row_id: str, state: RowState, shown: bool, base: int
) -> list[RowDelta]:
    """The deltas that set a replica's copy of a row to its current visible state with its real
    clocks: an eviction at ``base``, then (if ``shown``) the row's real state, or (if it is
    deleted) its tombstone. See the module docstring."""
    eviction = RowDelta.create("DELETE", table, row_id, VIEW_EVICTION_CLIENT, {}, base)
    return [eviction, *row_state_deltas(table, row_id, state, shown)]


def whole_row_snapshot(
    table: str, row_id: str, values: Mapping[str, Any] | None, base: int
) -> list[RowDelta]:
    """A row snapshot for a client without view evictions: an eviction at ``base``, then, when
    the row is shown (``values``, its visible columns, not None), an ``INSERT`` of all of them
    at ``base`` from :data:`~lakesync.delta.VIEW_ENTRY_CLIENT`. See the module docstring."""
    eviction = RowDelta.of_stored("DELETE", table, row_id, VIEW_EVICTION_CLIENT, {}, base)
    if values is None:
        return [eviction]
    return [eviction, RowDelta.of_stored("INSERT", table, row_id, VIEW_ENTRY_CLIENT, values, base)]


def row_state_deltas(table: str, row_id: str, state: RowState, shown: bool) -> list[RowDelta]:
    """A row's real state as deltas at their real clocks (a snapshot without its eviction): its
    tombstone when it has one and is ``shown`` or deleted, then, if ``shown``, an ``INSERT`` at
    its greatest write clock and one ``UPDATE`` per other clock of its visible cells."""
    out = []
    tomb = state.tombstone
    if tomb is not None and (shown or not state.live):
        out.append(RowDelta.of_stored("DELETE", table, row_id, tomb[1], {}, tomb[0]))
    if shown:
        for i, ((hlc, client), cells) in enumerate(_groups(state)):
            op: Op = "INSERT" if i == 0 else "UPDATE"
            out.append(RowDelta.of_stored(op, table, row_id, client, cells, hlc))
    return out


class SnapshotCache:
    """A bounded memo of row snapshots for one gateway of one store.

    Within a store a row's last ingest HLC identifies its merged state, so
    ``(table, row_id, last_ingest, base, shown, whole_rows)`` determines the snapshot; many
    clients pulling (or receiving broadcasts of) the same rows then share one deltaId
    computation.
    """

    def __init__(self, size: int = 65_536) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str, int, int, bool, bool], list[RowDelta]] = (
            OrderedDict()
        )

    def snapshot(
        self, key: RowKey, rec: RowRecord, shown: bool, base: int, whole_rows: bool = False
    ) -> list[RowDelta]:
        """The memoised :func:`row_snapshot` (or, for ``whole_rows``, :func:`whole_row_snapshot`)
        of a row record."""
        memo = (key[0], key[1], rec.last_ingest, base, shown, whole_rows)
        found = self._items.get(memo)
        if found is None:
            found = _snapshot(key, rec.state, shown, base, whole_rows)
            self._items[memo] = found
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        return found


def _snapshot(
    key: RowKey, state: RowState, shown: bool, base: int, whole_rows: bool
) -> list[RowDelta]:
    if whole_rows:
        return whole_row_snapshot(key[0], key[1], state.visible() if shown else None, base)
    return row_snapshot(key[0], key[1], state, shown, base)


def _snapshots(
    keys: Iterable[RowKey],
    rows: Mapping[RowKey, RowRecord],
    reader: Reader,
    cache: SnapshotCache | None,
    history: RowHistory,
) -> list[RowDelta]:
    out: list[RowDelta] = []
    fresh = reader.since == 0
    for key in keys:
        rec = rows.get(key)
        if rec is None:
            continue
        shown = visible(reader.rules, reader.claims, key[0], rec.state.visible())
        if not shown and (
            key not in reader.written if fresh else not may_hold(key, reader, rec.state, history)
        ):
            continue  # the client cannot hold it: say nothing about it
        base = max(rec.last_ingest, reader.stamp)
        if cache is None:
            out.extend(_snapshot(key, rec.state, shown, base, reader.whole_rows))
        else:
            out.extend(cache.snapshot(key, rec, shown, base, reader.whole_rows))
    return out


def hidden_changed(rows: Mapping[RowKey, RowRecord], reader: Reader) -> list[RowKey]:
    """The rows invisible to the reader now that changed after its cursor: the ones whose
    history :func:`may_hold` needs (a fresh reader needs none)."""
    if reader.since == 0:
        return []
    return [
        k
        for k, r in rows.items()
        if r.last_ingest > reader.since
        and not visible(reader.rules, reader.claims, k[0], r.state.visible())
    ]


def page_view(
    deltas: Sequence[RowDelta],
    rows: Mapping[RowKey, RowRecord],
    reader: Reader,
    raw: bool,
    cache: SnapshotCache | None = None,
    history: RowHistory | None = None,
) -> list[RowDelta]:
    """The deltas a client receives for a page of the log (its deltas in ingest order; see the
    module docstring).

    ``raw`` (the gateway never had rules) passes the log through; otherwise each touched row
    becomes one snapshot, ordered by its last delta in the page. ``history`` must hold every
    row of :func:`hidden_changed`.
    """
    if raw:
        return list(deltas)
    last: dict[RowKey, None] = {}
    for d in deltas:
        key = (d.table, d.row_id)
        last.pop(key, None)
        last[key] = None
    return _snapshots(last, rows, reader, cache, history or {})


def resync_view(
    rows: Mapping[RowKey, RowRecord],
    reader: Reader,
    cache: SnapshotCache | None = None,
    history: RowHistory | None = None,
) -> list[RowDelta]:
    """Snapshots of every row of a gateway the client sees or may hold: the resync after a
    rules or claims change, and the first sync of a fresh client (exactly its view)."""
    return _snapshots(rows, rows, reader, cache, history or {})


def view_key(rules: SyncRules | None, claims: Mapping[str, Any]) -> Hashable:
    """What of a token decides the rows it sees under ``rules``: tokens with equal keys see the
    same rows (what a client wrote aside, see :func:`may_hold`), so a broadcast is computed once
    per key. Admins see everything; others, what :func:`~lakesync.rules.claim_values` reads."""
    applied = effective_rules(rules, claims)
    return (True,) if applied is None else (False, claim_values(applied, claims))


_Values = dict[str, Any]


class BroadcastView:
    """A stored batch's broadcast (its deltas in ingest order, cursor ``since`` just before
    them), prepared once for every receiver: :meth:`view` then gives one receiver exactly what
    :func:`page_view` gives it for a reader whose view did not change within the batch
    (``ViewHistory.fixed``), at the cost of a few :func:`~lakesync.rules.visible` calls per row.

    Each touched row's visible state at every point since the cursor is worked out here, once,
    instead of in :func:`may_hold` for each receiver.
    """

    def __init__(
        self,
        deltas: Sequence[RowDelta],
        rows: Mapping[RowKey, RowRecord],
        since: int,
        cache: SnapshotCache | None = None,
        history: RowHistory | None = None,
    ) -> None:
        self.since = since
        self._cache = cache
        history = history or {}
        last: dict[RowKey, None] = {}
        for d in deltas:
            key = (d.table, d.row_id)
            last.pop(key, None)
            last[key] = None
        self._rows: list[tuple[RowKey, RowRecord, _Values | None, list[_Values | None], set[str]]]
        self._rows = []
        for key in last:
            rec = rows.get(key)
            if rec is None:
                continue
            past = [s.visible() for _, s in _states_since(key, since, (), rec.state, history)]
            self._rows.append((key, rec, rec.state.visible(), past, _writers(key, history)))
        self.writers: frozenset[str] = frozenset().union(*(r[4] for r in self._rows))
        """Every client that wrote a row of the batch: a receiver among them may hold rows
        others of its view may not (:func:`may_hold`)."""

    def states(self) -> Iterator[tuple[str, _Values | None]]:
        """Each touched row's table and visible state, now and at every point since the
        cursor: a receiver that sees none of them and wrote none hears nothing."""
        for key, _, now, past, _ in self._rows:
            yield key[0], now
            for values in past:
                yield key[0], values

    def view(self, reader: Reader) -> list[RowDelta]:
        """The deltas ``reader`` receives: its cursor is :attr:`since` and its view was
        ``reader.rules`` and ``reader.claims`` throughout."""
        out: list[RowDelta] = []
        fresh = reader.since == 0
        for key, rec, now, past, writers in self._rows:
            shown = visible(reader.rules, reader.claims, key[0], now)
            if not shown:
                if fresh:
                    held = key in reader.written
                else:
                    held = reader.client_id in writers or any(
                        visible(reader.rules, reader.claims, key[0], p) for p in past
                    )
                if not held:
                    continue
            base = max(rec.last_ingest, reader.stamp)
            if self._cache is None:
                out.extend(_snapshot(key, rec.state, shown, base, reader.whole_rows))
            else:
                out.extend(self._cache.snapshot(key, rec, shown, base, reader.whole_rows))
        return out
