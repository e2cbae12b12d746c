"""The drivers of the sync core: they perform its effects with a transport and the replica.

:class:`AsyncDriver` performs them on an event loop: requests with an :class:`AsyncTransport`,
replica reads and writes with the :class:`LocalStore` (applying a pulled page or a checkpoint
frame, up to ``pull_limit`` deltas, in a worker thread so the loop keeps receiving the next one
meanwhile; SQLite releases the GIL while it writes; the other replica calls are short and run on
the loop). It serialises the core's calls. :class:`AsyncLakeSyncClient` awaits it on the
caller's loop; :class:`BlockingDriver` runs it on the blocking client's loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from lakesync.client import _core as core
from lakesync.client._core import (
    Conversation,
    Effect,
    Request,
    SyncCore,
    SyncProgressHandler,
    SyncReport,
)
from lakesync.client._loop import LoopThread
from lakesync.client._store import LocalStore
from lakesync.client._types import Change, Event
from lakesync.client.errors import LakeSyncError
from lakesync.client.transport import AsyncCheckpoint, AsyncTransport
from lakesync.delta import RowDelta
from lakesync.hlc import HLC

__all__ = ["AsyncDriver", "BlockingDriver"]

T = TypeVar("T")


class _Call:
    """What one running call holds besides the core: the request started ahead and the open
    checkpoint download."""

    def __init__(self, on_progress: SyncProgressHandler | None) -> None:
        self.on_progress = on_progress
        self.ahead: asyncio.Task[Any] | None = None
        self.checkpoint: AsyncCheckpoint | None = None

    async def release(self) -> None:
        """After a failure of the driver's own: let the request started ahead finish (a request
        cut off mid-way would leave its reply to the next one), close the download."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            with contextlib.suppress(BaseException):
                await ahead
        checkpoint, self.checkpoint = self.checkpoint, None
        if checkpoint is not None:
            with contextlib.suppress(BaseException):
                await checkpoint.pages.aclose()


class AsyncDriver:
    """Runs the :class:`SyncCore`'s calls between one replica and one gateway, on one loop."""

    def __init__(
        self,
        sync_core: SyncCore,
        store: LocalStore,
        transport: AsyncTransport,
        clock: HLC,
        client_id: str,
        gateway_id: str,
        *,
        notify: Callable[[list[Change]], None],
        emit: Callable[[Event], None],
        watching: Callable[[], bool] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.core = sync_core
        self.store = store
        self.transport = transport
        self.clock = clock
        self.client_id = client_id
        self.gateway_id = gateway_id
        self._notify = notify
        self._emit = emit
        # Asked as each remote batch commits: without a watch no row changes are built for it.
        self._watching = watching
        self._sleep = sleep
        self._cycle = asyncio.Lock()

    async def sync(
        self, retries: int | None = None, on_progress: SyncProgressHandler | None = None
    ) -> SyncReport:
        """See :meth:`SyncCore.sync`. Progress made before a failure (applied pages,
        acknowledged batches) is kept; ``on_progress`` receives a :class:`SyncProgress` after
        each checkpoint frame or pulled page applied (counts only grow: a download a retry
        starts over counts again)."""
        return await self._run(self.core.sync(retries), on_progress)

    async def sync_once(self, on_progress: SyncProgressHandler | None = None) -> SyncReport:
        """See :meth:`SyncCore.sync_once`."""
        return await self._run(self.core.sync_once(), on_progress)

    async def pull(self) -> int:
        """See :meth:`SyncCore.pull`."""
        return await self._run(self.core.pull())

    async def push(self) -> tuple[int, int]:
        """See :meth:`SyncCore.push`."""
        return await self._run(self.core.push())

    def apply_broadcast(self, deltas: list[RowDelta]) -> None:
        """Apply realtime deltas at once (see :meth:`SyncCore.broadcast`)."""
        self._apply(SyncCore.broadcast(deltas))

    # -- performing effects -------------------------------------------------------------------

    async def _run(
        self, conversation: Conversation[T], on_progress: SyncProgressHandler | None = None
    ) -> T:
        async with self._cycle:
            call = _Call(on_progress)
            try:
                step = conversation.start()
                while not isinstance(step, core.Finished):
                    try:
                        outcome = await self._perform(step, call)
                    except LakeSyncError as exc:
                        outcome = core.Fail(exc)
                    step = conversation.send(outcome)
                return step.value
            except BaseException:
                conversation.close()
                await call.release()
                raise

    async def _perform(self, effect: Effect, call: _Call) -> Any:
        match effect:
            case core.Ahead(request):
                call.ahead = asyncio.get_running_loop().create_task(self._request(request, call))
                return None
            case core.Collect():
                ahead, call.ahead = call.ahead, None
                assert ahead is not None
                return await ahead
            case core.CloseCheckpoint():
                checkpoint, call.checkpoint = call.checkpoint, None
                if checkpoint is not None:
                    await checkpoint.pages.aclose()
                return None
            case core.ReadCursor():
                return self.store.cursor(self.gateway_id)
            case core.ReadOutbox(limit, max_bytes):
                return self.store.outbox(limit, max_bytes)
            case core.FindUnknown(deltas):
                return self.store.unknown(deltas)
            case core.AdoptSchemas(schemas):
                self.store.adopt(schemas)
            case core.ApplyRows():
                if effect.deltas:
                    changes = await asyncio.to_thread(self._applied, effect)
                else:
                    changes = self._applied(effect)
                self._notify(changes)
            case core.BeginResync():
                self.store.begin_resync()
            case core.FinishResync(server_hlc):
                self._notify(self.store.finish_resync(self.gateway_id, server_hlc, self.clock))
            case core.Acknowledge(seqs, server_hlc):
                self.store.ack(seqs, server_hlc)
            case core.RecordFailure(seqs, error):
                self.store.record_failure(seqs, error)
            case core.MoveToDeadLetters(entry, code, error):
                self._notify(self.store.dead_letter(entry, code, error))
            case core.Emit(event):
                self._emit(event)
            case core.ReportProgress(progress):
                if call.on_progress is not None:
                    call.on_progress(progress)
            case core.Wait(seconds):
                await self._sleep(seconds)
            case _:
                return await self._request(effect, call)
        return None

    async def _request(self, request: Request, call: _Call) -> Any:
        """Send one request to the gateway; its outcome for the core."""
        match request:
            case core.Pull(since, limit):
                return await self.transport.pull(self.client_id, since, limit)
            case core.Push(deltas, last_seen_hlc):
                return await self.transport.push(self.client_id, deltas, last_seen_hlc)
            case core.FetchSchemas():
                return await self.transport.schemas()
            case core.OpenCheckpoint():
                call.checkpoint = await self.transport.checkpoint()
                if call.checkpoint is None:
                    return None
                return core.OpenedCheckpoint(call.checkpoint.server_hlc)
            case core.NextFrame():
                checkpoint = call.checkpoint
                assert checkpoint is not None
                frame = await _next(checkpoint)
                if frame is None:
                    return None
                return core.CheckpointFrame(frame, checkpoint.received.bytes)
        raise AssertionError(f"not a request: {request!r}")  # pragma: no cover

    def _apply(self, effect: core.ApplyRows) -> None:
        self._notify(self._applied(effect))

    def _applied(self, effect: core.ApplyRows) -> list[Change]:
        cursor = None if effect.cursor is None else (self.gateway_id, effect.cursor)
        return self.store.apply_remote(
            effect.deltas,
            effect.origin,
            self.clock,
            cursor=cursor,
            mark=effect.mark,
            watched=self._watching,
            checkpoint_at=effect.checkpoint_at,
        )


async def _next(checkpoint: AsyncCheckpoint) -> list[RowDelta] | None:
    return await anext(checkpoint.pages, None)


class BlockingDriver:
    """An :class:`AsyncDriver` run on a loop thread: the same calls, blocking."""

    def __init__(self, driver: AsyncDriver, loop: LoopThread) -> None:
        self.driver = driver
        self._loop = loop

    @property
    def transport(self) -> AsyncTransport:
        """The driver's transport."""
        return self.driver.transport

    def sync(
        self, retries: int | None = None, on_progress: SyncProgressHandler | None = None
    ) -> SyncReport:
        """See :meth:`AsyncDriver.sync`."""
        return self._loop.run(self.driver.sync(retries, on_progress))

    def sync_once(self) -> SyncReport:
        """See :meth:`AsyncDriver.sync_once`."""
        return self._loop.run(self.driver.sync_once())

    def pull(self) -> int:
        """See :meth:`AsyncDriver.pull`."""
        return self._loop.run(self.driver.pull())

    def push(self) -> tuple[int, int]:
        """See :meth:`AsyncDriver.push`."""
        return self._loop.run(self.driver.push())
