"""Between the asyncio transport core and blocking callers, in both directions.

:class:`BlockingTransport` gives an :class:`AsyncTransport` the blocking :class:`Transport`
interface by running it on a loop thread of its own (what :class:`HttpTransport` and
:class:`WebSocketTransport` are). :func:`as_async` gives a client the asyncio core of any
transport it is handed: a blocking one of ours is unwrapped (the client drives its core on its
own loop), any other :class:`Transport` is called in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from lakesync.client._loop import LoopThread
from lakesync.client.transport._base import (
    AsyncCheckpoint,
    AsyncTransport,
    BroadcastHandler,
    Checkpoint,
    EventHandler,
    PullPage,
    PushResult,
    ReconnectHandler,
    Transport,
)
from lakesync.delta import RowDelta

__all__ = ["BlockingTransport", "as_async"]

T = TypeVar("T")
A = TypeVar("A", bound=AsyncTransport)


class BlockingTransport(Transport, Generic[A]):
    """A blocking :class:`Transport` that runs an asyncio transport (its ``core``, an
    ``implementation`` made with the constructor's arguments) on a loop thread of its own
    (started by the first call). Handlers run on that thread."""

    implementation: type[A]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.core: A = self.implementation(*args, **kwargs)
        self.realtime = self.core.realtime
        self._loop = LoopThread(f"lakesync-{type(self).__name__}")

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushResult:
        """See :meth:`AsyncTransport.push`."""
        return self._loop.run(self.core.push(client_id, deltas, last_seen_hlc))

    def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        """See :meth:`AsyncTransport.pull`."""
        return self._loop.run(self.core.pull(client_id, since, limit))

    def checkpoint(self) -> Checkpoint | None:
        """See :meth:`AsyncTransport.checkpoint`; the pages download as they are iterated."""
        opened = self._loop.run(self.core.checkpoint())
        if opened is None:
            return None
        return Checkpoint(opened.server_hlc, self._pages(opened.pages), opened.received)

    def _pages(self, pages: AsyncGenerator[list[RowDelta], None]) -> Iterator[list[RowDelta]]:
        try:
            while (page := self._loop.run(anext(pages, None))) is not None:
                yield page
        finally:
            self._loop.run(pages.aclose())

    def actions(self, client_id: str, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """See :meth:`AsyncTransport.actions`."""
        return self._loop.run(self.core.actions(client_id, actions))

    def schemas(self) -> list[dict[str, Any]] | None:
        """See :meth:`AsyncTransport.schemas`."""
        return self._loop.run(self.core.schemas())

    def connect(self) -> None:
        """See :meth:`AsyncTransport.connect`."""
        self._loop.run(self.core.connect())

    def set_broadcast_handler(self, handler: BroadcastHandler | None) -> None:
        """See :meth:`AsyncTransport.set_broadcast_handler` (called on the loop thread)."""
        self.core.set_broadcast_handler(handler)

    def set_reconnect_handler(self, handler: Callable[[], None] | None) -> None:
        """Call ``handler`` in a worker thread after a dropped connection is back: its
        blocking pulls need the loop free."""
        if handler is None:
            self.core.set_reconnect_handler(None)
            return

        async def catch_up() -> None:
            await asyncio.to_thread(handler)

        self.core.set_reconnect_handler(catch_up)

    def set_event_handler(self, handler: EventHandler | None) -> None:
        """See :meth:`Transport.set_event_handler`."""
        super().set_event_handler(handler)
        self.core.set_event_handler(handler)

    @property
    def connected(self) -> bool:
        """See :attr:`AsyncTransport.connected`."""
        return self.core.connected

    def close(self) -> None:
        """Close the core, then stop the loop thread (idempotent)."""
        self._loop.run(self.core.aclose())
        self._loop.close()


class _ThreadedTransport(AsyncTransport):
    """The asyncio face of a caller's own blocking :class:`Transport`: each call runs in a
    worker thread; its handlers are brought back to the loop the calls come from."""

    def __init__(self, blocking: Transport) -> None:
        self._blocking = blocking
        self.realtime = blocking.realtime
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        self._loop = asyncio.get_running_loop()
        return await asyncio.to_thread(fn, *args)

    async def push(
        self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int
    ) -> PushResult:
        """See :meth:`Transport.push`."""
        return await self._call(self._blocking.push, client_id, deltas, last_seen_hlc)

    async def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        """See :meth:`Transport.pull`."""
        return await self._call(self._blocking.pull, client_id, since, limit)

    async def checkpoint(self) -> AsyncCheckpoint | None:
        """See :meth:`Transport.checkpoint`."""
        opened = await self._call(self._blocking.checkpoint)
        if opened is None:
            return None
        return AsyncCheckpoint(opened.server_hlc, _pages(opened.pages), opened.received)

    async def actions(self, client_id: str, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """See :meth:`Transport.actions`."""
        return await self._call(self._blocking.actions, client_id, actions)

    async def schemas(self) -> list[dict[str, Any]] | None:
        """See :meth:`Transport.schemas`."""
        return await self._call(self._blocking.schemas)

    def set_broadcast_handler(self, handler: BroadcastHandler | None) -> None:
        """Apply broadcasts on the loop the calls come from."""

        def on_loop(deltas: list[RowDelta]) -> None:
            assert handler is not None
            if self._loop is None:
                handler(deltas)  # nothing has run on a loop yet
            else:
                self._loop.call_soon_threadsafe(handler, deltas)

        self._blocking.set_broadcast_handler(None if handler is None else on_loop)

    def set_reconnect_handler(self, handler: ReconnectHandler | None) -> None:
        """Run ``handler`` on the loop the calls come from."""

        def on_loop() -> None:
            assert handler is not None
            if self._loop is not None:  # else nothing was synced to catch up on
                asyncio.run_coroutine_threadsafe(_awaited(handler()), self._loop).result()

        self._blocking.set_reconnect_handler(None if handler is None else on_loop)

    def set_event_handler(self, handler: EventHandler | None) -> None:
        """See :meth:`Transport.set_event_handler`."""
        super().set_event_handler(handler)
        self._blocking.set_event_handler(handler)

    @property
    def connected(self) -> bool:
        """See :attr:`Transport.connected`."""
        return self._blocking.connected

    async def aclose(self) -> None:
        """See :meth:`Transport.close`."""
        await asyncio.to_thread(self._blocking.close)


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


async def _pages(pages: Iterator[list[RowDelta]]) -> AsyncGenerator[list[RowDelta], None]:
    while (page := await asyncio.to_thread(next, pages, None)) is not None:
        yield page


def as_async(transport: Transport | AsyncTransport) -> AsyncTransport:
    """The asyncio transport a client runs on for ``transport`` (see the module's docstring).
    Handlers of a caller's own blocking transport must be set on the client's loop."""
    if isinstance(transport, AsyncTransport):
        return transport
    if isinstance(transport, BlockingTransport):
        return transport.core  # type: ignore[no-any-return]
    return _ThreadedTransport(transport)
