"""The hot-log store interface: one durable log of accepted deltas plus the merged row state.

A :class:`HotLog` holds, for every gateway (tenant) it serves, the deltas accepted by push in
ingest order, the merged per-cell state of every row (``lakesync.merge.RowState``), the gateway's
sync rules (with the ingest stamp of their last change), table schemas and connector documents,
and per-client view stamps. Ingest HLCs are strictly increasing across the whole store and are
visible to readers without gaps, so a reader that has seen ingest ``h`` will never later find a
new entry at or below ``h``. The landing flusher reads the same log with :meth:`HotLog.read_log`.

Its consumers each take the narrow port of the role they play (:mod:`lakesync.hotlog.ports`),
and the gateway's composition root (:mod:`lakesync.api.cli`, :func:`lakesync.api.app.create_app`)
hands one store to each of them; this module
re-exports the records the ports exchange (:mod:`lakesync.hotlog.records`) and holds their
stored forms. Implementations are synchronous (they run in worker threads under the async app)
and safe to call from many threads at once.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import msgspec

from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.ports import (
    CheckpointServing,
    CheckpointSink,
    Coordination,
    DocumentStore,
    HotLogSource,
    LogMaintenance,
    LogStatus,
    PullLog,
    PushLog,
    RowLookup,
    RulesStore,
)
from lakesync.hotlog.records import (
    AppendResult,
    CheckpointInfo,
    LogEntry,
    LogNotice,
    Page,
    RulesRecord,
    WriteCheck,
)
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


class HotLog(
    PushLog,
    PullLog,
    CheckpointServing,
    CheckpointSink,
    LogStatus,
    LogMaintenance,
    HotLogSource,
    RulesStore,
    DocumentStore,
    RowLookup,
    Coordination,
    abc.ABC,
):
    """The durable hot log of accepted deltas and the merged row state, for many gateways:
    every port of :mod:`lakesync.hotlog.ports` at once, and the store's lifecycle."""

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
