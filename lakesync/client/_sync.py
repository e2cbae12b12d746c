"""One sync cycle: pull every page (or a checkpoint first), push the whole outbox, then pull
again if the push stored anything.

The engine owns no I/O of its own: it moves deltas between a :class:`LocalStore` and an
:class:`AsyncTransport`, serialises cycles, retries transient failures with backoff and
dead-letters deltas the gateway refuses for good. It is asyncio code, awaited by
:class:`AsyncLakeSyncClient` on the caller's loop and run by :class:`LakeSyncClient` on its
loop thread (:class:`BlockingEngine`).

Local SQLite calls are short (one outbox batch, one acknowledgement, a small broadcast) and
run on the loop; applying a pulled page or a checkpoint frame (up to ``pull_limit`` deltas)
runs in a worker thread, so the loop keeps receiving the next page meanwhile (SQLite releases
the GIL while it writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from lakesync.client._backoff import Backoff, is_retryable, rejects_entries
from lakesync.client._loop import LoopThread
from lakesync.client._store import LocalStore, OutboxEntry
from lakesync.client._types import Change, Event
from lakesync.client.errors import (
    CursorExpiredError,
    LakeSyncError,
    RateLimitedError,
    SyncFailedError,
)
from lakesync.client.transport import AsyncTransport
from lakesync.delta import RowDelta
from lakesync.errors import SchemaError
from lakesync.hlc import HLC
from lakesync.schema import TableSchema, parse_schema

__all__ = ["BlockingEngine", "SyncEngine", "SyncProgress", "SyncProgressHandler", "SyncReport"]

T = TypeVar("T")

_log = logging.getLogger(__name__)

# The gateway accepts at most 1 MiB per push body; stay well under it (JSON adds framing).
_PUSH_MAX_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one :meth:`SyncEngine.sync` did."""

    pulled: int
    pushed: int
    dead_lettered: int
    cursor: int


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


class SyncEngine:
    """Runs sync cycles between one replica and one gateway (on one event loop)."""

    def __init__(
        self,
        store: LocalStore,
        transport: AsyncTransport,
        clock: HLC,
        client_id: str,
        gateway_id: str,
        *,
        notify: Callable[[list[Change]], None],
        emit: Callable[[Event], None],
        backoff: Backoff,
        pull_limit: int = 1000,
        push_batch: int = 1000,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        watching: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.transport = transport
        self.clock = clock
        self.client_id = client_id
        self.gateway_id = gateway_id
        self._notify = notify
        self._emit = emit
        self.backoff = backoff
        self.pull_limit = pull_limit
        self.push_batch = push_batch
        self._sleep = sleep
        # Asked as each remote batch commits: without a watch no row changes are built for it.
        self._watching = watching
        self._cycle = asyncio.Lock()
        self._checkpoint_absent = False
        self._schemas_adopted = False
        self._asked: set[tuple[str, str]] = set()  # unknown names the gateway was asked about
        self._on_progress: SyncProgressHandler | None = None  # set for one sync call
        self._rows = self._bytes = 0  # this sync call's progress so far

    # -- public -----------------------------------------------------------------------------

    async def sync(
        self, retries: int | None = None, on_progress: SyncProgressHandler | None = None
    ) -> SyncReport:
        """Pull, push, and pull again after a push, retrying transient failures with backoff.

        Progress made before a failure (applied pages, acknowledged batches) is kept. Raises the
        gateway's error for a non-retryable failure (e.g. ``AuthError``) and
        :class:`SyncFailedError` once ``retries`` (default: the backoff's ``max_retries``) run out.
        ``on_progress`` receives a :class:`SyncProgress` after each checkpoint frame or pulled
        page applied (counts only grow: a download a retry starts over counts again).
        """
        limit = self.backoff.max_retries if retries is None else retries
        attempt = 0
        self._rows = self._bytes = 0
        while True:
            try:
                report = await self.sync_once(on_progress)
            except LakeSyncError as exc:
                self._emit(Event("sync_error", str(exc), {"code": exc.code}))
                if not is_retryable(exc):
                    raise
                if attempt >= limit:
                    raise SyncFailedError(
                        f"sync gave up after {attempt + 1} attempts: {exc}", exc
                    ) from exc
                delay = self.backoff.delay(attempt)
                if isinstance(exc, RateLimitedError):
                    delay = max(delay, exc.retry_after)
                await self._sleep(delay)
                attempt += 1
                continue
            self._emit(
                Event(
                    "synced",
                    f"pulled {report.pulled}, pushed {report.pushed}",
                    {"pulled": report.pulled, "pushed": report.pushed, "cursor": report.cursor},
                )
            )
            return report

    async def sync_once(self, on_progress: SyncProgressHandler | None = None) -> SyncReport:
        """One pull-push-pull cycle without retries; the first also takes the gateway's table
        schemas (the store's ``adopt``) before it pulls a row. ``on_progress``: see
        :meth:`sync`."""
        async with self._cycle:
            self._on_progress = on_progress
            try:
                return await self._cycle_once()
            finally:
                self._on_progress = None

    async def _cycle_once(self) -> SyncReport:
        if not self._schemas_adopted:
            await self._adopt_schemas()
            self._schemas_adopted = True
        pulled = await self._pull_all()
        pushed, dead = await self._push_all()
        if pushed:
            # What the push did to this replica's view comes back in a pull (a row it gave
            # away leaves it): take it in this cycle, not the next.
            pulled += await self._pull_all()
        return SyncReport(pulled, pushed, dead, self.store.cursor(self.gateway_id))

    async def pull(self) -> int:
        """Pull every page (one cycle's first half, no retries); returns deltas applied."""
        async with self._cycle:
            return await self._pull_all()

    async def push(self) -> tuple[int, int]:
        """Push the whole outbox (no retries); returns ``(acknowledged, dead-lettered)``."""
        async with self._cycle:
            return await self._push_all()

    def apply_broadcast(self, deltas: list[RowDelta]) -> None:
        """Apply realtime deltas at once; the cursor stays, so the next pull re-checks them."""
        changes = self.store.apply_remote(deltas, "realtime", self.clock, watched=self._watching)
        self._notify(changes)

    # -- pull -------------------------------------------------------------------------------

    async def _pull_all(self) -> int:
        cursor = self.store.cursor(self.gateway_id)
        applied = 0
        if cursor == 0 and not self._checkpoint_absent:
            applied, cursor = await self._load_checkpoint()
        try:
            return applied + await self._pull_pages(cursor)
        except CursorExpiredError as exc:
            # Offline for longer than the gateway keeps its hot log: start over from its
            # checkpoint (pending writes stay in the outbox and keep winning), then pull on.
            self._emit(Event("resync", str(exc), {"cursor": cursor}))
            applied, cursor = await self._load_checkpoint(resync=True)
            if self._checkpoint_absent:
                raise
            return applied + await self._pull_pages(cursor)

    async def _pull_pages(self, cursor: int) -> int:
        applied = 0
        page = await self.transport.pull(self.client_id, cursor, self.pull_limit)
        while True:
            stalled = page.server_hlc <= cursor and not page.deltas
            more = page.has_more and not stalled
            # While a page is applied the next one is already on its way (its cursor is known
            # as soon as the reply arrives), so network and SQLite work overlap on long pulls.
            following = (
                _ahead(self.transport.pull(self.client_id, page.server_hlc, self.pull_limit))
                if more
                else None
            )
            async with _settled(following):
                await self._learn_types(page.deltas)
                # Page and cursor commit together: a crash leaves both at the previous page.
                changes = await asyncio.to_thread(
                    self.store.apply_remote,
                    page.deltas,
                    "remote",
                    self.clock,
                    cursor=(self.gateway_id, page.server_hlc),
                    watched=self._watching,
                )
            applied += len(page.deltas)
            self._notify(changes)
            if page.deltas:  # an empty page moved nothing: no report
                self._progressed(len(page.deltas), 0, "pull")
            cursor = max(cursor, page.server_hlc)
            if following is None:
                return applied
            page = await following

    async def _adopt_schemas(self) -> None:
        self.store.adopt(_parsed(await self.transport.schemas() or ()))

    async def _learn_types(self, deltas: Sequence[RowDelta]) -> None:
        """Ask the gateway for its schemas again when ``deltas`` name a table or column this
        replica lacks (registered after the first cycle), so it is held as its type rather
        than as the type its values suggest; each unknown name is asked about once."""
        new = self.store.unknown(deltas) - self._asked
        if new:
            self._asked |= new
            await self._adopt_schemas()

    async def _load_checkpoint(self, resync: bool = False) -> tuple[int, int]:
        """Apply the gateway's checkpoint and move the cursor to its position. A ``resync``
        (the cursor expired) also forgets every row the checkpoint does not send."""
        checkpoint = await self.transport.checkpoint()
        if checkpoint is None:
            self._checkpoint_absent = True
            return 0, 0
        self._checkpoint_absent = False
        if resync:
            self.store.begin_resync()
        applied = 0
        pages = checkpoint.pages
        reported = 0  # this checkpoint's bytes already reported
        try:
            # While a frame is applied the next one is downloaded and decoded, as pull pages are.
            following = _ahead(_next(pages))
            while (deltas := await following) is not None:
                following = _ahead(_next(pages))
                async with _settled(following):
                    await self._learn_types(deltas)
                    changes = await asyncio.to_thread(
                        self.store.apply_remote,
                        deltas,
                        "remote",
                        self.clock,
                        mark=resync,
                        watched=self._watching,
                        checkpoint_at=checkpoint.server_hlc,
                    )
                self._notify(changes)
                applied += len(deltas)
                self._progressed(len(deltas), checkpoint.received.bytes - reported, "checkpoint")
                reported = checkpoint.received.bytes
        finally:
            await pages.aclose()
        # The cursor moves only once the whole snapshot is in: a broken download starts over.
        if resync:
            changes = self.store.finish_resync(self.gateway_id, checkpoint.server_hlc, self.clock)
        else:
            changes = self.store.apply_remote(
                [], "remote", self.clock, (self.gateway_id, checkpoint.server_hlc)
            )
        self._notify(changes)
        return applied, checkpoint.server_hlc

    def _progressed(self, rows: int, size: int, stage: Literal["checkpoint", "pull"]) -> None:
        self._rows += rows
        self._bytes += size
        if self._on_progress is not None:
            self._on_progress(SyncProgress(self._rows, self._bytes, stage))

    # -- push -------------------------------------------------------------------------------

    async def _push_all(self) -> tuple[int, int]:
        pushed = dead = 0
        while batch := self.store.outbox(self.push_batch, _PUSH_MAX_BYTES):
            ok, bad = await self._push_batch(batch)
            pushed += ok
            dead += bad
        return pushed, dead

    async def _push_batch(self, entries: Sequence[OutboxEntry]) -> tuple[int, int]:
        seqs = [e.seq for e in entries]
        try:
            result = await self.transport.push(
                self.client_id, [e.delta for e in entries], self.store.cursor(self.gateway_id)
            )
        except LakeSyncError as exc:
            if not rejects_entries(exc):
                self.store.record_failure(seqs, str(exc))
                raise
            if len(entries) > 1:
                # A batch is atomic, so find the culprit by halving; the rest still goes through.
                mid = len(entries) // 2
                a = await self._push_batch(entries[:mid])
                b = await self._push_batch(entries[mid:])
                return a[0] + b[0], a[1] + b[1]
            entry = entries[0]
            self._notify(self.store.dead_letter(entry, exc.code, exc.message))
            self._emit(
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
        self.store.ack(seqs, result.server_hlc)
        return len(entries), 0


def _ahead(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Start ``coro`` now, to be awaited later."""
    return asyncio.get_running_loop().create_task(coro)


async def _next(pages: AsyncGenerator[list[RowDelta], None]) -> list[RowDelta] | None:
    return await anext(pages, None)


@contextlib.asynccontextmanager
async def _settled(ahead: asyncio.Task[Any] | None) -> AsyncGenerator[None, None]:
    """On a failure, let the request started ahead finish (its outcome dropped) before the
    failure propagates: a request cut off mid-way would leave its reply to the next one."""
    try:
        yield
    except BaseException:
        if ahead is not None:
            with contextlib.suppress(BaseException):
                await ahead
        raise


class BlockingEngine:
    """A :class:`SyncEngine` driven from a loop thread: the same methods, blocking."""

    def __init__(self, core: SyncEngine, loop: LoopThread) -> None:
        self.core = core
        self._loop = loop

    @property
    def transport(self) -> AsyncTransport:
        """The engine's transport."""
        return self.core.transport

    def sync(
        self, retries: int | None = None, on_progress: SyncProgressHandler | None = None
    ) -> SyncReport:
        """See :meth:`SyncEngine.sync`."""
        return self._loop.run(self.core.sync(retries, on_progress))

    def sync_once(self) -> SyncReport:
        """See :meth:`SyncEngine.sync_once`."""
        return self._loop.run(self.core.sync_once())

    def pull(self) -> int:
        """See :meth:`SyncEngine.pull`."""
        return self._loop.run(self.core.pull())

    def push(self) -> tuple[int, int]:
        """See :meth:`SyncEngine.push`."""
        return self._loop.run(self.core.push())


def _parsed(docs: Sequence[dict[str, Any]]) -> list[TableSchema]:
    """The gateway's schemas this client can read (a newer gateway's may use more)."""
    out = []
    for doc in docs:
        try:
            out.append(parse_schema(doc, stored=True))
        except SchemaError as exc:
            _log.warning("ignoring a schema of the gateway: %s", exc.message)
    return out
