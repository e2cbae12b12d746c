"""The hot log's ports: one protocol per role its consumers play with it, each method in one.

A consumer takes the port of the role it plays, and any store that has those methods serves it:

- the push path (:class:`PushLog`) and the pull path (:class:`PullLog`, the initial sync's
  :class:`CheckpointServing`), both in the gateway's sync service;
- where the log stands (:class:`LogStatus`: health, metrics, backpressure, the admin status);
- the lake's jobs: the landing flusher and fresh reads read through :class:`HotLogSource`, mark
  what landed and trim through :class:`LogMaintenance`, and the checkpoint builder writes through
  :class:`CheckpointSink`;
- administration: :class:`RulesStore`, :class:`DocumentStore` and :class:`RowLookup` (the
  declared configuration, schemas, connectors, actions, the console);
- :class:`Coordination` between the processes sharing one store (notices, leaders, mutexes).

A consumer that plays several roles takes the intersection declared below (:class:`SyncStore`,
:class:`LakeStore`, :class:`StatusStore`, :class:`AdminStore`), never a port of its own.
:class:`~lakesync.hotlog.base.HotLog` is every port at once: the SQLite and PostgreSQL stores
implement it, and one behaviour suite per area runs on both (``tests/hotlog/``).

Every method is synchronous (the async app calls it from a worker thread) and safe to call from
many threads at once.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lakesync.delta import RowDelta
    from lakesync.hlc import HLC
    from lakesync.hotlog.records import (
        AppendResult,
        CheckpointInfo,
        LogEntry,
        LogNotice,
        Page,
        RulesRecord,
        WriteCheck,
    )
    from lakesync.merge import RowState
    from lakesync.rules import SyncRules
    from lakesync.views import RowKey, RowRecord

__all__ = [
    "AdminStore",
    "CheckpointServing",
    "CheckpointSink",
    "Checkpoints",
    "Coordination",
    "DocumentStore",
    "HotLogSource",
    "LakeStore",
    "LogMaintenance",
    "LogStatus",
    "PullLog",
    "PushLog",
    "RowLookup",
    "RulesStore",
    "StatusStore",
    "SyncStore",
]


# -- the log ------------------------------------------------------------------------------------
class HotLogSource(Protocol):
    """The log read in ingest order, every gateway at once or one: what the lake reads (the
    landing flusher, fresh reads of what has not landed yet) and the admin status counts."""

    @abc.abstractmethod
    def read_log(self, after: int, limit: int, gateway_id: str | None = None) -> list[LogEntry]:
        """Entries with ``ingest_hlc > after`` (of one gateway, if given), oldest first, at most
        ``limit``."""


class LogStatus(Protocol):
    """Where the log stands: whether the store answers, its head, what landed, what waits and
    how far each gateway's log was trimmed (health, metrics, backpressure, the admin status)."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise if the store cannot be reached (the readiness probe)."""

    @abc.abstractmethod
    def head(self) -> int:
        """The greatest ingest HLC stored (0 when empty)."""

    @abc.abstractmethod
    def flushed_position(self) -> int:
        """The last position passed to :meth:`LogMaintenance.mark_flushed` (0 if none)."""

    @abc.abstractmethod
    def unflushed_bytes(self) -> int:
        """Stored size of the entries after the flushed position (drives backpressure)."""

    @abc.abstractmethod
    def trimmed_through(self, gateway_id: str) -> int:
        """The gateway's hot-log horizon (0 = nothing trimmed); see :class:`CheckpointInfo`."""


class PushLog(Protocol):
    """The push path: accepted deltas appended to the log. Ingest HLCs are strictly increasing
    across the whole store and visible to readers without gaps: a reader that has seen ingest
    ``h`` never later finds a new entry at or below ``h``."""

    clock: HLC
    """The clock ingest HLCs are taken from (a push merges its clients' HLCs into it first)."""

    @abc.abstractmethod
    def append(
        self, gateway_id: str, deltas: Sequence[RowDelta], check: WriteCheck | None = None
    ) -> AppendResult:
        """Store a push batch atomically and durably: skip known deltaIds, stamp each new delta
        with a strictly increasing ingest HLC, merge it into its row; return after commit.
        ``check`` (if given) judges the new deltas first, in the same transaction: no write of
        another process can come between it and the append."""

    @abc.abstractmethod
    def committed_head(self) -> int:
        """The greatest ingest HLC handed out and committed (an entry, a rules or view stamp, or
        the floor :meth:`raise_floor` set; 0 when none): every entry at or below it is
        committed. A cheap read that takes no lock."""

    @abc.abstractmethod
    def raise_floor(self, stamp: int) -> int:
        """Make every later ingest HLC of this store exceed ``stamp``, durably (its own committed
        write, serialised with every append), and return :meth:`committed_head` as of then (at
        least ``stamp``). Stores served as one (:mod:`lakesync.hotlog.sharded`) keep one ingest
        order across them with it; a single store never needs it."""


class PullLog(Protocol):
    """The pull path: pages of one gateway's log with the merged state (``lakesync.merge.
    RowState``) of the rows they touch, row histories, who wrote which row and what decided
    each client's view over time."""

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
    def read_matching(
        self, gateway_id: str, lookups: Sequence[tuple[str, Sequence[str]]], keys: Sequence[RowKey]
    ) -> Page | None:
        """The rows the rules' filter-column index finds for ``lookups`` (as
        :func:`lakesync.rules.lookups` makes them) plus ``keys``, and the head, read
        consistently; None when the index does not follow the gateway's current rules (a store
        from before the index: the caller reads every row). The index is rebuilt whenever the
        rules change and kept up to date by every append."""

    @abc.abstractmethod
    def read_relation(
        self, gateway_id: str, table: str, lookups: Sequence[tuple[str, Sequence[str]]] | None
    ) -> dict[RowKey, RowState]:
        """The merged states of (at least) the rows of ``table`` the rules' filter-column index
        finds for ``lookups`` (as :func:`lakesync.rules.relation_lookups` makes them), read
        consistently: what binding a client's subqueries reads. Every row of the table when
        ``lookups`` is None or the index does not follow the current rules."""

    @abc.abstractmethod
    def row_history(
        self, gateway_id: str, keys: Sequence[RowKey], since: int, upto: int
    ) -> dict[RowKey, tuple[RowState, list[tuple[int, RowDelta]]]]:
        """Per row: its merged state at ingest ``since`` and its deltas in ``(since, upto]`` in
        ingest order, each with the ingest HLC of the end of its push batch (the row's states
        inside a batch were never visible)."""

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
    def rows_written_if_few(
        self, gateway_id: str, client_id: str, limit: int
    ) -> set[RowKey] | None:
        """Every row a client has pushed a delta of, if it has at most ``limit`` deltas in the
        log and at most ``limit`` rows whose entries were trimmed; None past that. A checkpoint
        then looks up its rows once rather than per chunk (a fresh client wrote nothing); the
        work is bounded by ``limit``, however much the client wrote."""

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


class LogMaintenance(Protocol):
    """What the lake's jobs write back into the log: the landing flusher's marks and the
    trimming that checkpoints allow."""

    @abc.abstractmethod
    def mark_flushed(self, position: int) -> None:
        """Record that every entry with ingest HLC <= ``position`` reached the landing table."""

    @abc.abstractmethod
    def trim_log(self, gateway_id: str, upto: int, limit: int = 10_000) -> int:
        """Delete up to ``limit`` of the gateway's oldest log entries ingested at or before
        ``upto``, never past its checkpoint's position nor past the flushed position, and move
        its horizon (:attr:`CheckpointInfo.trimmed`) to the last entry deleted in the same
        transaction; with nothing to delete the horizon stays. Returns how many went (call
        again while it returns ``limit``). Merged row states stay."""


# -- checkpoints (:mod:`lakesync.checkpoint_chunks`) -----------------------------------------
class Checkpoints(Protocol):
    """A gateway's published checkpoint."""

    @abc.abstractmethod
    def checkpoint(self, gateway_id: str) -> CheckpointInfo | None:
        """The gateway's published checkpoint (None when it has none)."""


class CheckpointServing(Checkpoints, Protocol):
    """What the initial sync streams: the published checkpoint's chunks."""

    @abc.abstractmethod
    def checkpoint_chunk(self, gateway_id: str, upto: int, seq: int) -> bytes | None:
        """One stored chunk of the checkpoint at ``upto`` (None when that generation is gone)."""


class CheckpointSink(Checkpoints, Protocol):
    """Where the lake's checkpoint builder (:mod:`lakesync.lakehouse.checkpoint_builder`) puts
    checkpoints: staged chunk by chunk, then published at once if newer than the current one."""

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


# -- administration ----------------------------------------------------------------------------
class RulesStore(Protocol):
    """A gateway's sync rules, with the ingest stamp of their last change."""

    @abc.abstractmethod
    def get_rules(self, gateway_id: str) -> RulesRecord:
        """The gateway's sync rules and the stamp of their last change."""

    @abc.abstractmethod
    def set_rules(self, gateway_id: str, rules: SyncRules | None) -> RulesRecord:
        """Replace the rules; a real change gets a fresh ingest stamp (clients then resync)."""


class DocumentStore(Protocol):
    """Named JSON documents per gateway and kind (table schemas, connectors and their cursors,
    action records, the declared config applied, the status history)."""

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


class RowLookup(Protocol):
    """Stored rows looked up by key or paged through by id (connectors, the console)."""

    @abc.abstractmethod
    def read_rows(self, gateway_id: str, keys: Sequence[RowKey]) -> dict[RowKey, RowRecord]:
        """The current state of the given rows (missing rows are left out)."""

    @abc.abstractmethod
    def row_ids(self, gateway_id: str, table: str, after: str | None, limit: int) -> list[str]:
        """The ids of ``table``'s stored rows (live or deleted) after ``after`` (None = from the
        first), in id order, at most ``limit``: a whole table paged through in bounded memory."""


class Coordination(Protocol):
    """What the processes sharing one store coordinate through: append notices, leaders and
    store-wide mutexes."""

    @abc.abstractmethod
    def listen(self, callback: Callable[[LogNotice], None]) -> None:
        """Call ``callback`` for appends made by other processes."""

    @abc.abstractmethod
    def lead(self, role: str) -> bool:
        """Whether this process leads ``role`` among the processes sharing the store (one landing
        flusher, one pipeline scheduler), taking the lead if nobody holds it. Raises the store's
        outage error (:func:`lakesync.errors.is_store_outage`) while it cannot be reached: nobody
        can be said to lead then."""

    @abc.abstractmethod
    def exclusive(self, name: str) -> AbstractContextManager[object]:
        """Hold the store-wide mutex ``name`` for the block, across processes (each landing
        flush runs under one)."""


# -- consumers that play several roles ---------------------------------------------------------
class SyncStore(
    PushLog, PullLog, CheckpointServing, LogStatus, RulesStore, DocumentStore, Protocol
):
    """What serving the sync API takes (:class:`lakesync.api.services.sync.SyncService` and the
    handlers around it): the push and pull paths, the initial sync, where the log stands, and
    the schemas and rules they check against."""


class LakeStore(
    HotLogSource, LogMaintenance, CheckpointSink, DocumentStore, Coordination, Protocol
):
    """What the lake's jobs next to a gateway take (:mod:`lakesync.lakehouse.schedule`, started
    by :mod:`lakesync.api.lake`): read the log and mark what landed under the landing mutex, read
    the registered schemas, publish checkpoints, trim the log; each job runs where its role's
    lead is, and its runs are recorded in the status history."""


class StatusStore(HotLogSource, LogStatus, DocumentStore, Protocol):
    """What the admin status reads (:class:`lakesync.api.services.status.StatusService`): the
    log not landed yet, where the log stands and the documents of its history."""


class AdminStore(RowLookup, RulesStore, DocumentStore, Protocol):
    """What the connectors and the console take (:mod:`lakesync.api.services.connectors`,
    :mod:`lakesync.api.services.console`): stored rows, rules and documents."""
