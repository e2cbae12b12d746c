"""The client's sync core, without I/O: what to send, what to apply, when to retry.

A call of the core (:meth:`SyncCore.sync`, :meth:`SyncCore.pull`, :meth:`SyncCore.push`) is a
:class:`Conversation`: it hands out one *effect* at a time (a request to send, rows to apply, an
outbox batch to read, an event to report, a wait) and is told each effect's *outcome* (the
gateway's reply, the rows read, the end of a wait) or its failure. The core decides everything a
sync decides: a checkpoint first (or after the cursor expired, a re-sync), paging on ``hasMore``,
the cursor each page commits, pushing the outbox in batches, bisecting a refused batch down to
the delta to dead-letter, and retrying transient failures with backoff. It holds no socket, no
SQLite connection, no thread and no clock: drivers (:mod:`lakesync.client._drive`) perform the
effects, and tests feed outcomes in and read effects out.

Two effects overlap network and SQLite work on long pulls: :class:`Ahead` starts a request whose
outcome is only asked for later with :class:`Collect`, so a page is applied while the next one
is on its way.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

from lakesync.client._backoff import Backoff, is_retryable, rejects_entries
from lakesync.client._outbox import OutboxEntry
from lakesync.client._types import Event, Origin, Rejection, SyncReport
from lakesync.client.errors import (
    CursorExpiredError,
    LakeSyncError,
    RateLimitedError,
    SyncFailedError,
)
from lakesync.client.transport import PullPage, PushResult
from lakesync.delta import RowDelta
from lakesync.errors import SchemaError
from lakesync.schema import TableSchema, parse_schema

__all__ = [
    "Acknowledge",
    "AdoptSchemas",
    "Ahead",
    "ApplyRows",
    "BeginResync",
    "CheckpointFrame",
    "CloseCheckpoint",
    "Collect",
    "Conversation",
    "Effect",
    "Emit",
    "Fail",
    "FetchSchemas",
    "FindUnknown",
    "FinishResync",
    "Finished",
    "MoveToDeadLetters",
    "NextFrame",
    "OpenCheckpoint",
    "OpenedCheckpoint",
    "Pull",
    "Push",
    "ReadCursor",
    "ReadOutbox",
    "RecordFailure",
    "Rejection",
    "ReportProgress",
    "SyncCore",
    "SyncProgress",
    "SyncProgressHandler",
    "SyncReport",
    "Wait",
]

T = TypeVar("T")

_log = logging.getLogger(__name__)

# The gateway accepts at most 1 MiB per push body; stay well under it (JSON adds framing).
PUSH_MAX_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class SyncProgress:
    """How far one sync has pulled: reported after each checkpoint frame or pull page applied,
    so a first sync of a large replica can show a progress bar."""

    rows: int
    """Deltas applied so far in this sync (checkpoint rows and pulled deltas)."""
    bytes: int
    """Checkpoint bytes received so far (pulled pages are not counted: 0 without a checkpoint)."""
    stage: Literal["checkpoint", "pull"]
    """What was applied last: a frame of the gateway's checkpoint or a pulled page."""


SyncProgressHandler = Callable[[SyncProgress], None]
"""Receives a :class:`SyncProgress` after each frame or page a sync applies (on the thread or
loop running the sync: keep it short)."""


# -- effects: what the core asks a driver to do ------------------------------------------------
# Requests to the gateway (their outcome is the transport's reply) ...


@dataclass(frozen=True, slots=True)
class Pull:
    """Ask for the deltas after ``since`` (at most ``limit``); outcome: a :class:`PullPage`."""

    since: int
    limit: int


@dataclass(frozen=True, slots=True)
class Push:
    """Send one atomic batch; outcome: a :class:`PushResult`."""

    deltas: list[RowDelta]
    last_seen_hlc: int


@dataclass(frozen=True, slots=True)
class FetchSchemas:
    """Ask for the gateway's table schemas; outcome: their documents, or None."""


@dataclass(frozen=True, slots=True)
class OpenCheckpoint:
    """Open the gateway's checkpoint; outcome: an :class:`OpenedCheckpoint`, or None (none)."""


@dataclass(frozen=True, slots=True)
class NextFrame:
    """Receive the open checkpoint's next frame; outcome: a :class:`CheckpointFrame`, or None
    at its end."""


@dataclass(frozen=True, slots=True)
class CloseCheckpoint:
    """Release the open checkpoint's download (also after a failure); outcome: None."""


Request = Pull | Push | FetchSchemas | OpenCheckpoint | NextFrame


@dataclass(frozen=True, slots=True)
class Ahead:
    """Start ``request`` now without waiting; its outcome is asked for by :class:`Collect`."""

    request: Request


@dataclass(frozen=True, slots=True)
class Collect:
    """Wait for the request started by the last :class:`Ahead`; outcome: its outcome."""


# ... the local replica (outcome None unless said) ...


@dataclass(frozen=True, slots=True)
class ReadCursor:
    """Read the replica's cursor for the gateway; outcome: an ``int``."""


@dataclass(frozen=True, slots=True)
class ReadOutbox:
    """Read the oldest queued deltas; outcome: a list of :class:`OutboxEntry`."""

    limit: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FindUnknown:
    """Ask which ``(table, column)`` names of ``deltas`` the replica lacks; outcome: a set."""

    deltas: list[RowDelta]


@dataclass(frozen=True, slots=True)
class AdoptSchemas:
    """Take the gateway's table schemas into the replica."""

    schemas: list[TableSchema]


@dataclass(frozen=True, slots=True)
class ApplyRows:
    """Merge remote deltas in one transaction (with the cursor, when given) and tell the
    watchers. ``mark``: rows a re-sync sent; ``checkpoint_at``: a checkpoint frame's position."""

    deltas: list[RowDelta]
    origin: Origin = "remote"
    cursor: int | None = None
    mark: bool = False
    checkpoint_at: int | None = None


@dataclass(frozen=True, slots=True)
class BeginResync:
    """Start marking the rows a re-sync's checkpoint sends."""


@dataclass(frozen=True, slots=True)
class FinishResync:
    """Forget every row the re-sync's checkpoint did not send; the cursor moves to
    ``server_hlc`` (and the watchers are told)."""

    server_hlc: int


@dataclass(frozen=True, slots=True)
class Acknowledge:
    """Mark outbox entries acknowledged by a push answered with ``server_hlc``."""

    seqs: list[int]
    server_hlc: int


@dataclass(frozen=True, slots=True)
class RecordFailure:
    """Count a failed attempt on outbox entries."""

    seqs: list[int]
    error: str


@dataclass(frozen=True, slots=True)
class MoveToDeadLetters:
    """Move an entry the gateway refused for good to the dead letters (and tell the watchers)."""

    entry: OutboxEntry
    code: str
    error: str


# ... and the caller.


@dataclass(frozen=True, slots=True)
class Emit:
    """Report ``event`` to the client's listeners."""

    event: Event


@dataclass(frozen=True, slots=True)
class ReportProgress:
    """Hand ``progress`` to the sync call's progress handler."""

    progress: SyncProgress


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait ``seconds`` (a retry's backoff); outcome: None once the time is up."""

    seconds: float


Effect = (
    Request
    | Ahead
    | Collect
    | CloseCheckpoint
    | ReadCursor
    | ReadOutbox
    | FindUnknown
    | AdoptSchemas
    | ApplyRows
    | BeginResync
    | FinishResync
    | Acknowledge
    | RecordFailure
    | MoveToDeadLetters
    | Emit
    | ReportProgress
    | Wait
)


@dataclass(frozen=True, slots=True)
class OpenedCheckpoint:
    """Outcome of :class:`OpenCheckpoint`: the position to pull from once it is applied."""

    server_hlc: int


@dataclass(frozen=True, slots=True)
class CheckpointFrame:
    """Outcome of :class:`NextFrame`: its deltas, and the checkpoint's bytes received so far."""

    deltas: list[RowDelta]
    received: int


@dataclass(frozen=True, slots=True)
class Finished(Generic[T]):
    """A conversation's end: the call's result."""

    value: T


@dataclass(frozen=True, slots=True)
class Fail:
    """An effect's failure, as told to :meth:`Conversation.send`."""

    error: LakeSyncError


Steps = Generator[Effect, Any, T]


class Conversation(Generic[T]):
    """One call of the core as effects out and outcomes in: :meth:`start`, then
    :meth:`send` each effect's outcome (or a :class:`Fail`) until a :class:`Finished` comes
    back. An error the call ends with is raised by the :meth:`send` that ends it."""

    def __init__(self, steps: Steps[T]) -> None:
        self._steps = steps

    def start(self) -> Effect | Finished[T]:
        """The first effect."""
        return self.send(None)

    def send(self, outcome: Any) -> Effect | Finished[T]:
        """Tell the outcome of the last effect (a :class:`Fail` for its failure); the next
        effect, or the end."""
        try:
            if isinstance(outcome, Fail):
                return self._steps.throw(outcome.error)
            return self._steps.send(outcome)
        except StopIteration as stop:
            return Finished(cast(T, stop.value))

    def close(self) -> None:
        """Abandon the call (a driver's own failure)."""
        self._steps.close()


class SyncCore:
    """The sync decisions of one replica and one gateway, and what it has learnt between calls
    (whether the gateway has a checkpoint, whether its schemas were taken, which unknown names
    it was asked about). ``rand`` draws the backoff's jitter."""

    def __init__(
        self,
        backoff: Backoff,
        *,
        pull_limit: int = 1000,
        push_batch: int = 1000,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.backoff = backoff
        self.pull_limit = pull_limit
        self.push_batch = push_batch
        self._rand = rand
        self._checkpoint_absent = False
        self._schemas_adopted = False
        self._asked: set[tuple[str, str]] = set()
        self._rows = self._bytes = 0  # the running sync call's progress
        self._rejected: list[Rejection] = []  # the running sync call's refused changes

    # -- calls ------------------------------------------------------------------------------

    def sync(self, retries: int | None = None) -> Conversation[SyncReport]:
        """Pull, push, and pull again after a push, retrying transient failures with backoff:
        ``Emit(sync_error)`` and a :class:`Wait` per retry, ``Emit(synced)`` at the end. Ends
        with the gateway's error for a non-retryable failure and :class:`SyncFailedError` once
        ``retries`` (default: the backoff's ``max_retries``) run out."""
        return Conversation(self._sync(self.backoff.max_retries if retries is None else retries))

    def sync_once(self) -> Conversation[SyncReport]:
        """One pull-push-pull cycle without retries."""
        return Conversation(self._once())

    def pull(self) -> Conversation[int]:
        """Pull every page (no retries); ends with the deltas applied."""
        return Conversation(self._pull_all())

    def push(self) -> Conversation[tuple[int, int]]:
        """Push the whole outbox (no retries); ends with ``(acknowledged, dead-lettered)``."""
        return Conversation(self._push_all())

    @staticmethod
    def broadcast(deltas: list[RowDelta]) -> ApplyRows:
        """What to do with realtime deltas: apply them at once, without moving the cursor
        (the next pull re-checks them)."""
        return ApplyRows(deltas, "realtime")

    # -- sync -------------------------------------------------------------------------------

    def _once(self) -> Steps[SyncReport]:
        self._rejected = []
        return (yield from self._cycle())

    def _sync(self, limit: int) -> Steps[SyncReport]:
        attempt = 0
        self._rows = self._bytes = 0
        # Refusals of every attempt: a retried cycle does not push them again.
        self._rejected = []
        while True:
            try:
                report = yield from self._cycle()
            except LakeSyncError as exc:
                yield Emit(Event("sync_error", str(exc), {"code": exc.code}))
                if not is_retryable(exc):
                    raise
                if attempt >= limit:
                    raise SyncFailedError(
                        f"sync gave up after {attempt + 1} attempts: {exc}", exc
                    ) from exc
                delay = self.backoff.delay(attempt, self._rand)
                if isinstance(exc, RateLimitedError):
                    delay = max(delay, exc.retry_after)
                yield Wait(delay)
                attempt += 1
                continue
            yield Emit(
                Event(
                    "synced",
                    f"pulled {report.pulled}, pushed {report.pushed}",
                    {"pulled": report.pulled, "pushed": report.pushed, "cursor": report.cursor},
                )
            )
            return report

    def _cycle(self) -> Steps[SyncReport]:
        if not self._schemas_adopted:
            yield from self._adopt_schemas()
            self._schemas_adopted = True
        pulled = yield from self._pull_all()
        pushed, _ = yield from self._push_all()
        if pushed:
            # What the push did to this replica's view comes back in a pull (a row it gave
            # away leaves it): take it in this cycle, not the next.
            pulled += yield from self._pull_all()
        cursor: int = yield ReadCursor()
        rejected = tuple(self._rejected)
        return SyncReport(pulled, pushed, len(rejected), cursor, rejected)

    # -- pull -------------------------------------------------------------------------------

    def _pull_all(self) -> Steps[int]:
        cursor: int = yield ReadCursor()
        applied = 0
        if cursor == 0 and not self._checkpoint_absent:
            applied, cursor = yield from self._load_checkpoint()
        try:
            return applied + (yield from self._pull_pages(cursor))
        except CursorExpiredError as exc:
            # Offline for longer than the gateway keeps its hot log: start over from its
            # checkpoint (pending writes stay in the outbox and keep winning), then pull on.
            yield Emit(Event("resync", str(exc), {"cursor": cursor}))
            applied, cursor = yield from self._load_checkpoint(resync=True)
            if self._checkpoint_absent:
                raise
            return applied + (yield from self._pull_pages(cursor))

    def _pull_pages(self, cursor: int) -> Steps[int]:
        applied = 0
        page: PullPage = yield Pull(cursor, self.pull_limit)
        while True:
            stalled = page.server_hlc <= cursor and not page.deltas
            more = page.has_more and not stalled
            if more:
                # The next page is on its way while this one is applied (its cursor is known
                # as soon as the reply arrives), so network and SQLite work overlap.
                yield Ahead(Pull(page.server_hlc, self.pull_limit))
            # Page and cursor commit together: a crash leaves both at the previous page.
            yield from _settled(
                self._apply(page.deltas, ApplyRows(page.deltas, cursor=page.server_hlc)), more
            )
            applied += len(page.deltas)
            if page.deltas:  # an empty page moved nothing: no report
                yield from self._progressed(len(page.deltas), 0, "pull")
            cursor = max(cursor, page.server_hlc)
            if not more:
                return applied
            page = yield Collect()

    def _apply(self, deltas: list[RowDelta], apply: ApplyRows) -> Steps[None]:
        """Learn the types of names the replica lacks, then apply."""
        new: set[tuple[str, str]] = (yield FindUnknown(deltas)) - self._asked
        if new:
            # A table or column registered after the first cycle: ask the gateway again, so it
            # is held as its type rather than as the type its values suggest (once a name).
            self._asked |= new
            yield from self._adopt_schemas()
        yield apply

    def _adopt_schemas(self) -> Steps[None]:
        docs: Sequence[dict[str, Any]] | None = yield FetchSchemas()
        yield AdoptSchemas(_parsed(docs or ()))

    def _load_checkpoint(self, resync: bool = False) -> Steps[tuple[int, int]]:
        """Apply the gateway's checkpoint and move the cursor to its position. A ``resync``
        (the cursor expired) also forgets every row the checkpoint does not send."""
        opened: OpenedCheckpoint | None = yield OpenCheckpoint()
        if opened is None:
            self._checkpoint_absent = True
            return 0, 0
        self._checkpoint_absent = False
        at = opened.server_hlc
        if resync:
            yield BeginResync()
        applied = reported = 0  # reported: this checkpoint's bytes already reported
        try:
            # While a frame is applied the next one is received and decoded, as pages are.
            yield Ahead(NextFrame())
            while (frame := (yield Collect())) is not None:
                assert isinstance(frame, CheckpointFrame)
                yield Ahead(NextFrame())
                apply = ApplyRows(frame.deltas, mark=resync, checkpoint_at=at)
                yield from _settled(self._apply(frame.deltas, apply), True)
                applied += len(frame.deltas)
                got = frame.received - reported
                yield from self._progressed(len(frame.deltas), got, "checkpoint")
                reported = frame.received
        except LakeSyncError:
            yield CloseCheckpoint()
            raise
        yield CloseCheckpoint()
        # The cursor moves only once the whole snapshot is in: a broken download starts over.
        yield FinishResync(at) if resync else ApplyRows([], cursor=at)
        return applied, at

    def _progressed(
        self, rows: int, size: int, stage: Literal["checkpoint", "pull"]
    ) -> Steps[None]:
        self._rows += rows
        self._bytes += size
        yield ReportProgress(SyncProgress(self._rows, self._bytes, stage))

    # -- push -------------------------------------------------------------------------------

    def _push_all(self) -> Steps[tuple[int, int]]:
        pushed = dead = 0
        while batch := (yield ReadOutbox(self.push_batch, PUSH_MAX_BYTES)):
            ok, bad = yield from self._push_batch(batch)
            pushed += ok
            dead += bad
        return pushed, dead

    def _push_batch(self, entries: list[OutboxEntry]) -> Steps[tuple[int, int]]:
        seqs = [e.seq for e in entries]
        cursor: int = yield ReadCursor()
        try:
            result: PushResult = yield Push([e.delta for e in entries], cursor)
        except LakeSyncError as exc:
            if not rejects_entries(exc):
                yield RecordFailure(seqs, str(exc))
                raise
            if len(entries) > 1:
                # A batch is atomic, so find the culprit by halving; the rest still goes through.
                mid = len(entries) // 2
                a = yield from self._push_batch(entries[:mid])
                b = yield from self._push_batch(entries[mid:])
                return a[0] + b[0], a[1] + b[1]
            entry = entries[0]
            yield MoveToDeadLetters(entry, exc.code, exc.message)
            self._rejected.append(Rejection(entry.delta, exc.code, exc.message))
            yield Emit(
                Event(
                    "dead_letter",
                    f"the gateway refused delta {entry.delta.delta_id}: {exc.message}",
                    {
                        "delta_id": entry.delta.delta_id,
                        "table": entry.delta.table,
                        "row_id": entry.delta.row_id,
                        "code": exc.code,
                        "error": exc.message,
                    },
                )
            )
            return 0, 1
        yield Acknowledge(seqs, result.server_hlc)
        return len(entries), 0


def _settled(steps: Steps[None], ahead: bool) -> Steps[None]:
    """Run ``steps``; on a failure with a request started ahead, let that request finish (its
    outcome dropped) before the failure goes on: a request cut off mid-way would leave its
    reply to the next one."""
    try:
        yield from steps
    except LakeSyncError:
        if ahead:
            with contextlib.suppress(LakeSyncError):
                yield Collect()
        raise


def _parsed(docs: Sequence[dict[str, Any]]) -> list[TableSchema]:
    """The gateway's schemas this client can read (a newer gateway's may use more)."""
    out = []
    for doc in docs:
        try:
            out.append(parse_schema(doc, stored=True))
        except SchemaError as exc:
            _log.warning("ignoring a schema of the gateway: %s", exc.message)
    return out

