"""Paging a fresh client's first pull under sync rules.

Under rules a fresh client (``since=0``) receives its whole view as row snapshots
(:func:`lakesync.views.resync_view`). So that this honours ``limit``/``hasMore`` (SPEC §5) with
``serverHlc`` as the only cursor, the first page records, per client, the rows still to send
(those the client sees or wrote, found once) under a *continuation cursor*: a value below every
real ingest HLC (``[2^40, 2^48)``, random per first sync so two devices of one client never
share one), so it is always below the view stamp and the pull with it is a resync again. The
next pull with that cursor reads those rows' current state and sends the next page; the last
page answers the position of the first one (``max(head, stamp)``), from which the client pulls
the log as usual, so every change made meanwhile reaches it there.

The records are this process's memory, bounded (least recently used go first). A continuation
cursor the gateway no longer knows (restart, another gateway process, evicted, or the rules or
the client's claims changed meanwhile) is served as any cursor below the view stamp: one full
resync from it, which evicts every row the client may hold. Correct, only not paged.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from lakesync.views import RowKey

__all__ = ["PendingResync", "ResyncPages"]

_CURSOR_BASE = 1 << 40
_CURSOR_SPAN = (1 << 48) - (1 << 41)


@dataclass(frozen=True, slots=True)
class PendingResync:
    """The rest of a paged first sync: the rows still to send in order, the view stamp it is
    read under, the cursor its last page answers, and the cursor of the next page after this
    one (consecutive pages answer consecutive cursors)."""

    keys: Sequence[RowKey]
    stamp: int
    final: int
    cursor: int


class ResyncPages:
    """Continuation cursors of paged first syncs, per gateway and client, bounded by rows held."""

    def __init__(self, max_rows: int = 2_000_000, max_entries: int = 1024) -> None:
        self.max_rows = max_rows
        self.max_entries = max_entries
        self._items: OrderedDict[tuple[str, str, int], PendingResync] = OrderedDict()
        self._rows = 0

    @staticmethod
    def first_cursor() -> int:
        """A new first sync's first continuation cursor (below every real ingest HLC)."""
        return _CURSOR_BASE + secrets.randbelow(_CURSOR_SPAN)

    def put(self, gateway_id: str, client_id: str, pending: PendingResync) -> int:
        """Remember ``pending`` under its cursor; returns that cursor."""
        key = (gateway_id, client_id, pending.cursor)
        old = self._items.pop(key, None)
        if old is not None:
            self._rows -= len(old.keys)
        self._items[key] = pending
        self._rows += len(pending.keys)
        while self._items and (self._rows > self.max_rows or len(self._items) > self.max_entries):
            _, dropped = self._items.popitem(last=False)
            self._rows -= len(dropped.keys)
        return pending.cursor

    def get(self, gateway_id: str, client_id: str, cursor: int, stamp: int) -> PendingResync | None:
        """The rest of the first sync a pull from ``cursor`` continues, if this process knows
        it and the client's view (``stamp``) did not change since. Kept, so a retried pull gets
        the same page again."""
        key = (gateway_id, client_id, cursor)
        found = self._items.get(key)
        if found is None or found.stamp != stamp:
            return None
        self._items.move_to_end(key)
        return found
