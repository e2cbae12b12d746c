"""One asyncio event loop on a thread of its own, for blocking callers of the asyncio core.

The client's transports and sync engine are asyncio code. :class:`AsyncLakeSyncClient` awaits
them on the caller's loop; :class:`LakeSyncClient` (and the blocking transports) hand each call
to a :class:`LoopThread` and wait for its result, so both run the same implementation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread, started by the first call (thread-safe)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; its outcome as a future any thread can wait on."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name=self._name, daemon=True
                )
                self._thread.start()
            loop, thread = self._loop, self._thread
        if threading.current_thread() is thread:
            coro.close()
            # Waiting on the loop from its own thread (a callback the loop runs) never ends.
            raise RuntimeError(
                "a blocking LakeSyncClient call from one of its own callbacks would deadlock; "
                "hand it to another thread"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception)."""
        return self.submit(coro).result()

    def close(self, timeout: float = 30.0) -> None:
        """Finish the loop's async generators, stop the loop and its thread (idempotent)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()
