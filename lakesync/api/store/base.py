"""The hot-log store interface: one durable log of accepted deltas plus the merged row state.

A :class:`HotLog` holds, for every gateway (tenant) it serves, the deltas accepted by push in
ingest order, the merged per-cell state of every row (``lakesync.merge.RowState``), the gateway's
sync rules (with the ingest stamp of their last change), table schemas and connector documents,
and per-client view stamps. Ingest HLCs are strictly increasing across the whole store and are
visible to readers without gaps, so a reader that has seen ingest ``h`` will never later find a
new entry at or below ``h``. The landing flusher reads the same log with :meth:`HotLog.read_log`.

Its consumers each take the narrow port they use (:mod:`lakesync.api.store.ports`); this module
holds the records the ports exchange and their stored forms. Implementations are synchronous
(they run in worker threads under the async app) and safe to call from many threads at once.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import NamedTuple

import msgspec

from lakesync.api.store.ports import Coordination, SyncStore
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.merge import RowState
from lakesync.merge import decode_row_state as decode_state  # stored form: the core's msgspec JSON
from lakesync.merge import encode_row_state as encode_state
from lakesync.rules import SyncRules, parse_rules, rules_to_wire
from lakesync.views import RowKey, RowRecord

__all__ = [
    "AppendResult",
    "CheckpointInfo",
    "HotLog",
    "LogEntry",
    "LogNotice",
    "Page",
    "RowKey",
    "RowRecord",
    "RulesRecord",
    "WriteCheck",
    "decode_delta",
    "decode_rules",
    "decode_state",
    "encode_delta",
    "encode_rules",
    "encode_state",
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
    """A gateway's published checkpoint (:mod:`lakesync.checkpoint`) and its hot-log horizon."""

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


WriteCheck = Callable[[SyncRules | None, Sequence[RowDelta], Mapping[RowKey, RowState]], None]
"""A push's write access, judged by :meth:`HotLog.append` inside its transaction, under the
writers' lock: called with the gateway's current rules, the deltas the append is about to store
(known deltaIds left out) and the stored states of the rows they touch (a row never written is
left out). Raising stores nothing and reaches the caller of the append."""

_delta_decoder = msgspec.json.Decoder(RowDelta)
_encoder = msgspec.json.Encoder()


def encode_delta(delta: RowDelta) -> bytes:
    """The stored form of a delta (trusted: it was validated on push)."""
    return _encoder.encode(delta)


def decode_delta(raw: bytes | str | memoryview) -> RowDelta:
    """Read a delta written by :func:`encode_delta`."""
    return _delta_decoder.decode(bytes(raw) if isinstance(raw, memoryview) else raw)


def encode_rules(rules: SyncRules | None) -> bytes | None:
    """The stored form of a rules document (None stays None)."""
    return None if rules is None else _encoder.encode(rules_to_wire(rules))


def decode_rules(raw: bytes | str | memoryview | None) -> SyncRules | None:
    """Read a rules document written by :func:`encode_rules`."""
    if raw is None:
        return None
    data = bytes(raw) if isinstance(raw, memoryview) else raw
    return parse_rules(msgspec.json.decode(data))


class HotLog(SyncStore, Coordination, abc.ABC):
    """The durable hot log of accepted deltas and the merged row state, for many gateways:
    every port of :mod:`lakesync.api.store.ports` at once, and the store's lifecycle."""

    def __init__(self, clock: HLC) -> None:
        self.clock = clock

    def listen(self, callback: Callable[[LogNotice], None]) -> None:
        """See :meth:`Coordination.listen`: a no-op for embedded stores (one process)."""

    def lead(self, role: str) -> bool:
        """See :meth:`Coordination.lead`. Embedded stores serve one process (``lakesync up``
        locks the data dir), so it always does."""
        return True

    def exclusive(self, name: str) -> AbstractContextManager[object]:
        """See :meth:`Coordination.exclusive`. Embedded stores serve one process: nothing to
        take."""
        return nullcontext()

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections and threads."""
