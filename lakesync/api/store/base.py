"""The hot-log store interface: one durable log of accepted deltas plus the merged row state.

A :class:`HotLog` holds, for every gateway (tenant) it serves, the deltas accepted by push in
ingest order, the merged per-cell state of every row (``lakesync.merge.RowState``), the gateway's
sync rules (with the ingest stamp of their last change), table schemas and connector documents,
and per-client view stamps. Ingest HLCs are strictly increasing across the whole store and are
visible to readers without gaps, so a reader that has seen ingest ``h`` will never later find a
new entry at or below ``h``. The landing flusher reads the same log with :meth:`HotLog.read_log`.

Implementations are synchronous (they run in worker threads under the async app) and safe to
call from many threads at once.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple

import msgspec

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
    """A gateway's published checkpoint (:mod:`lakesync.checkpoint_chunks`) and its hot-log horizon."""

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


class HotLog(abc.ABC):
    """The durable hot log of accepted deltas and the merged row state, for many gateways."""

    def __init__(self, clock: HLC) -> None:
        self.clock = clock

    # -- push ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def append(
        self, gateway_id: str, deltas: Sequence[RowDelta], check: WriteCheck | None = None
    ) -> AppendResult:
        """Store a push batch atomically and durably: skip known deltaIds, stamp each new delta
        with a strictly increasing ingest HLC, merge it into its row; return after commit.
        ``check`` (if given) judges the new deltas first, in the same transaction: no write of
        another process can come between it and the append."""

    # -- pull ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def read_page(self, gateway_id: str, after: int, limit: int, with_rows: bool) -> Page:
        """Entries of ``gateway_id`` with ingest HLC > ``after`` (at most ``limit``) and, when
        ``with_rows``, the current state of the rows they touch, read consistently."""

    @abc.abstractmethod
    def read_range(self, gateway_id: str, after: int, upto: int) -> Page:
        """Entries with ``after`` < ingest <= ``upto`` and the current state of their rows."""

    @abc.abstractmethod
    def read_all_rows(self, gateway_id: str) -> Page:
        """Every row of a gateway (no entries) and the head, read consistently (resyncs)."""

    @abc.abstractmethod
    def read_rows(self, gateway_id: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
        """The current state of the given rows (missing rows are left out)."""

    @abc.abstractmethod
    def row_history(
        self, gateway_id: str, keys: Sequence[RowKey], since: int, upto: int
    ) -> dict[RowKey, tuple[RowState, list[tuple[int, RowDelta]]]]:
        """Per row: its merged state at ingest ``since`` and its deltas in ``(since, upto]`` in
        ingest order, each with the ingest HLC of the end of its push batch (the row's states
        inside a batch were never visible)."""

    @abc.abstractmethod
    def read_matching(
        self, gateway_id: str, lookups: Sequence[tuple[str, Sequence[str]]], keys: Sequence[RowKey]
    ) -> Page | None:
        """The rows the rules' filter-column index finds for ``lookups`` (as
        :func:`lakesync.rules.lookups` makes them) plus ``keys``, and the head, read
        consistently; None when the index does not follow the gateway's current rules (a store
        from before the index: the caller reads every row). The index is rebuilt whenever the
        rules change and kept up to date by every append."""

    @abc.abstractmethod
    def row_ids(self, gateway_id: str, table: str, after: str | None, limit: int) -> list[str]:
        """The ids of ``table``'s stored rows (live or deleted) after ``after`` (None = from the
        first), in id order, at most ``limit``: a whole table paged through in bounded memory."""

    @abc.abstractmethod
    def rows_written_by(self, gateway_id: str, client_id: str) -> list[RowKey]:
        """Every row a client has pushed a delta of (a client pulling from 0 may hold them)."""

    @abc.abstractmethod
    def rows_written_among(
        self, gateway_id: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        """Those of ``keys`` the client has pushed a delta of (a checkpoint chunk's look-up:
        bounded by the chunk, not by everything the client wrote)."""

    @abc.abstractmethod
    def head(self) -> int:
        """The greatest ingest HLC stored (0 when empty)."""

    # -- landing flusher ----------------------------------------------------------------------
    @abc.abstractmethod
    def read_log(
        self, after: int, limit: int, gateway_id: str | None = None
    ) -> list[tuple[int, str, RowDelta]]:
        """Entries of every gateway (or of ``gateway_id``) with ingest HLC > ``after``, ascending,
        at most ``limit``: ``(ingest_hlc, gateway_id, delta)``. Used by the landing flusher."""

    @abc.abstractmethod
    def mark_flushed(self, position: int) -> None:
        """Record that every entry with ingest HLC <= ``position`` reached the landing table."""

    @abc.abstractmethod
    def flushed_position(self) -> int:
        """The last position passed to :meth:`mark_flushed` (0 if none)."""

    @abc.abstractmethod
    def unflushed_bytes(self) -> int:
        """Stored size of the entries after the flushed position (drives backpressure)."""

    # -- checkpoints and trimming -------------------------------------------------------------
    @abc.abstractmethod
    def stage_checkpoint_chunk(self, gateway_id: str, upto: int, seq: int, body: bytes) -> None:
        """Store chunk ``seq`` of a checkpoint of ``gateway_id`` at position ``upto`` (not served
        before :meth:`publish_checkpoint`); one short write per chunk, so a large checkpoint
        never holds up pushes."""

    @abc.abstractmethod
    def publish_checkpoint(self, gateway_id: str, upto: int, chunks: int, rows: int) -> bool:
        """Serve the staged checkpoint at ``upto`` from now on, if it is newer than the current
        one (True); the one it replaces stays readable until the next is published, older
        generations and stale staged chunks go. False (and its chunks dropped) otherwise."""

    @abc.abstractmethod
    def checkpoint(self, gateway_id: str) -> CheckpointInfo | None:
        """The gateway's published checkpoint (None when it has none)."""

    @abc.abstractmethod
    def checkpoint_chunk(self, gateway_id: str, upto: int, seq: int) -> bytes | None:
        """One stored chunk of the checkpoint at ``upto`` (None when that generation is gone)."""

    @abc.abstractmethod
    def trim_log(self, gateway_id: str, upto: int, limit: int = 10_000) -> int:
        """Delete up to ``limit`` of the gateway's oldest log entries ingested at or before
        ``upto``, never past its checkpoint's position nor past the flushed position, and move
        its horizon (:attr:`CheckpointInfo.trimmed`) in the same transaction. Returns how many
        went (call again while it returns ``limit``). Merged row states stay."""

    @abc.abstractmethod
    def trimmed_through(self, gateway_id: str) -> int:
        """The gateway's hot-log horizon (0 = nothing trimmed); see :class:`CheckpointInfo`."""

    # -- gateway documents --------------------------------------------------------------------
    @abc.abstractmethod
    def get_rules(self, gateway_id: str) -> RulesRecord:
        """The gateway's sync rules and the stamp of their last change."""

    @abc.abstractmethod
    def set_rules(self, gateway_id: str, rules: SyncRules | None) -> RulesRecord:
        """Replace the rules; a real change gets a fresh ingest stamp (clients then resync)."""

    @abc.abstractmethod
    def put_doc(self, gateway_id: str, kind: str, name: str, body: dict[str, Any]) -> None:
        """Store a named JSON document (``schema`` per table, ``connector`` per name)."""

    @abc.abstractmethod
    def update_doc(
        self,
        gateway_id: str,
        kind: str,
        name: str,
        change: Callable[[dict[str, Any] | None], dict[str, Any]],
    ) -> dict[str, Any]:
        """Read-modify-write one document atomically: store ``change(current body or None)``
        and return it, serialised with every other writer of the store (no update is lost). An
        error raised by ``change`` (which must be quick and do no I/O) stores nothing."""

    @abc.abstractmethod
    def list_docs(self, gateway_id: str, kind: str) -> dict[str, dict[str, Any]]:
        """Every document of a kind, by name."""

    @abc.abstractmethod
    def docs_of_kind(self, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
        """Every gateway's documents of a kind as ``(gateway_id, name, body)``, sorted."""

    @abc.abstractmethod
    def delete_doc(self, gateway_id: str, kind: str, name: str) -> bool:
        """Remove a document; False when it did not exist."""

    @abc.abstractmethod
    def delete_docs(
        self, gateway_id: str, kind: str, expired: Callable[[dict[str, Any]], bool]
    ) -> int:
        """Remove the documents of a kind whose body ``expired`` answers true (it must be quick
        and do no I/O), serialised with :meth:`update_doc`: a document changed meanwhile is
        judged as changed. Returns how many were removed."""

    @abc.abstractmethod
    def view_stamp(
        self, gateway_id: str, client_id: str, claims_hash: str, claims: Mapping[str, Any]
    ) -> int:
        """The ingest stamp of the last change of this client's claims (0 for the first one
        seen); changed claims (by ``claims_hash``) are recorded, with a fresh stamp, as a new
        version of the client's claims."""

    @abc.abstractmethod
    def view_history(
        self, gateway_id: str, client_id: str, since: int
    ) -> tuple[list[tuple[int, SyncRules | None]], list[tuple[int, dict[str, Any]]]]:
        """What decided a client's view from ingest ``since`` on: the gateway's rules versions
        and the client's claims versions as ``(stamp, value)`` in stamp order, each list
        starting with the version in effect at ``since`` (when there is one). Every version is
        kept as long as the store lives."""

    # -- lifecycle ----------------------------------------------------------------------------
    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the store cannot be reached."""

    def listen(self, callback: Callable[[LogNotice], None]) -> None:  # noqa: B027
        """Call ``callback`` for appends made by other processes (no-op for embedded stores)."""

    def lead(self, role: str) -> bool:
        """Whether this process leads ``role`` among the processes sharing the store (one landing
        flusher, one pipeline scheduler), taking the lead if nobody holds it. Embedded stores
        serve one process (``lakesync up`` locks the data dir), so it always does."""
        return True

    def exclusive(self, name: str) -> AbstractContextManager[object]:
        """Hold the store-wide mutex ``name`` for the block, across processes (each landing
        flush runs under one). Embedded stores serve one process: nothing to take."""
        return nullcontext()

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections and threads."""
