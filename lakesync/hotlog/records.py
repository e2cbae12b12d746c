"""The records the hot-log store's ports exchange (:mod:`lakesync.hotlog.ports`), below both
the ports and :mod:`lakesync.hotlog.base` (which re-exports them): the ports name them and the
store's interface subclasses the ports, so they live in neither (no import cycle)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import msgspec

from lakesync.delta import RowDelta
from lakesync.merge import RowState
from lakesync.rules import RelationRows, SyncRules
from lakesync.views import RowKey, RowRecord

__all__ = [
    "AppendResult",
    "CheckpointInfo",
    "LogEntry",
    "LogNotice",
    "Page",
    "RulesRecord",
    "WriteCheck",
]


class LogEntry(NamedTuple):
    """One accepted delta: its ingest HLC, its gateway and the delta itself."""

    ingest_hlc: int
    gateway_id: str
    delta: RowDelta


class RulesRecord(msgspec.Struct, frozen=True):
    """A gateway's sync rules (None = everything visible) and the ingest stamp of their last
    change (0 = rules were never set)."""

    rules: SyncRules | None
    stamp: int


class AppendResult(msgspec.Struct, frozen=True):
    """Outcome of an atomic push append.

    ``stored`` are the newly stored entries (known deltaIds are skipped), ``accepted`` counts
    stored plus duplicates, ``head`` is the store's ingest head after the append and ``rows``
    holds the merged state after the append of every row a new delta touched, ``before`` its
    state before (an empty state for a new row); ``rules`` are the gateway's rules the append
    judged and indexed under (read in its transaction).
    """

    stored: list[LogEntry]
    accepted: int
    head: int
    rows: dict[RowKey, RowRecord] = msgspec.field(default_factory=dict)
    before: dict[RowKey, RowState] = msgspec.field(default_factory=dict)
    rules: RulesRecord | None = None


class Page(msgspec.Struct, frozen=True):
    """A consistent read: log entries after a cursor, the current state of the rows they touch
    (when asked for), and the ingest head at the time of the read."""

    entries: list[LogEntry]
    rows: dict[RowKey, RowRecord]
    head: int
    has_more: bool


class CheckpointInfo(msgspec.Struct, frozen=True):
    """A gateway's published checkpoint (:mod:`lakesync.checkpoint_chunks`) and its hot-log
    horizon."""

    position: int
    """Every delta of the gateway ingested at or before it is in the checkpoint."""
    chunks: int
    """Its chunks are numbered ``0 .. chunks - 1``."""
    rows: int
    trimmed: int
    """The hot log no longer holds the gateway's deltas ingested at or before it (0 = none
    trimmed): a pull from an older cursor is refused with ``CURSOR_EXPIRED``."""
    previous: int | None = None
    """The position of the generation it replaced, still readable by streams that started on
    it (its chunks go when the next one is published)."""


class LogNotice(NamedTuple):
    """Another process appended entries ``(after, upto]`` for a gateway (cross-process fan-out)."""

    gateway_id: str
    after: int
    upto: int
    origin: str


WriteCheck = Callable[
    [SyncRules | None, Sequence[RowDelta], Mapping[RowKey, RowState], RelationRows], None
]
"""A push's write access, judged by :meth:`HotLog.append` inside its transaction, under the
writers' lock: called with the gateway's current rules, the deltas the append is about to store
(known deltaIds left out), the stored states of the rows they touch (a row never written is
left out) and a reader of other tables' rows in the same transaction (as
:meth:`HotLog.read_relation`), which relational rules judge through. Raising stores nothing
and reaches the caller of the append."""
