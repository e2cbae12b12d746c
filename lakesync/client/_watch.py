"""Watching the replica: callbacks and async iterators over row changes or query results."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lakesync.client._types import Change

__all__ = ["Watch", "Watchers"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


class Watch(Generic[T]):
    """A live subscription: calls its callback, or feeds ``async for``, until cancelled.

    Without a callback the items are buffered for async iteration; the iterator ends when the
    watch is cancelled (or its client closes). Also a context manager that cancels on exit.
    """

    def __init__(self, owner: Watchers, callback: Callable[[T], None] | None) -> None:
        self._owner = owner
        self._callback = callback
        self._lock = threading.Lock()
        self._buffer: list[T] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[T | None] | None = None
        self.cancelled = False

    def _deliver(self, item: T) -> None:
        if self.cancelled:
            return
        if self._callback is not None:
            try:
                self._callback(item)
            except Exception:
                _log.exception("a watch callback raised")
            return
        with self._lock:
            if self._queue is None or self._loop is None:
                self._buffer.append(item)
                return
            loop, q = self._loop, self._queue
        try:
            loop.call_soon_threadsafe(q.put_nowait, item)
        except RuntimeError:  # the consumer's loop is gone
            self.cancel()

    def cancel(self) -> None:
        """Stop delivering; a pending ``async for`` ends."""
        if self.cancelled:
            return
        self.cancelled = True
        self._owner.remove(self)
        with self._lock:
            loop, q = self._loop, self._queue
        if loop is not None and q is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(q.put_nowait, None)

    def __enter__(self) -> Watch[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def __aiter__(self) -> AsyncIterator[T]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[T]:
        with self._lock:
            if self._queue is None:
                self._loop = asyncio.get_running_loop()
                self._queue = asyncio.Queue()
                for item in self._buffer:
                    self._queue.put_nowait(item)
                self._buffer.clear()
            q = self._queue
        if self.cancelled:
            q.put_nowait(None)
        while True:
            got = await q.get()
            if got is None:
                return
            yield got


QueryRunner = Callable[
    [str, Sequence[Any] | Mapping[str, Any]], tuple[list[dict[str, Any]], frozenset[str]]
]


@dataclass(frozen=True, slots=True)
class _WatchedQuery:
    sql: str
    params: Sequence[Any] | Mapping[str, Any]
    rows: list[dict[str, Any]]
    tables: frozenset[str]


class Watchers:
    """The registry of a client's watches; dispatches each committed batch of changes."""

    def __init__(
        self, run_query: QueryRunner, commits: AbstractContextManager[Any] | None = None
    ) -> None:
        self._run_query = run_query
        # Held by every commit of the replica: a watch registers between two commits, so a
        # batch applied without building its changes (:meth:`watching` said no) precedes it.
        self._commits = commits or contextlib.nullcontext()
        self._lock = threading.Lock()
        self._tables: list[tuple[Watch[list[Change]], str | None]] = []
        self._queries: dict[Watch[list[dict[str, Any]]], _WatchedQuery] = {}

    def watch_table(
        self, table: str | None, callback: Callable[[list[Change]], None] | None
    ) -> Watch[list[Change]]:
        """Watch changed rows of ``table`` (None = every table)."""
        w: Watch[list[Change]] = Watch(self, callback)
        with self._commits, self._lock:
            self._tables.append((w, table))
        return w

    def watch_query(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any],
        callback: Callable[[list[dict[str, Any]]], None] | None,
    ) -> Watch[list[dict[str, Any]]]:
        """Watch a query's result: delivered now, then whenever a change alters it."""
        w: Watch[list[dict[str, Any]]] = Watch(self, callback)
        with self._commits:
            rows, tables = self._run_query(sql, params)
            with self._lock:
                self._queries[w] = _WatchedQuery(sql, params, rows, tables)
        w._deliver(rows)
        return w

    def watching(self) -> bool:
        """Whether any watch is registered (else a committed batch needs no changes built)."""
        with self._lock:
            return bool(self._tables or self._queries)

    def remove(self, w: Watch[Any]) -> None:
        """Forget a cancelled watch."""
        with self._lock:
            self._tables = [(x, t) for x, t in self._tables if x is not w]
            self._queries.pop(w, None)

    def cancel_all(self) -> None:
        """Cancel every watch (the client is closing)."""
        with self._lock:
            watches: list[Watch[Any]] = [w for w, _ in self._tables] + list(self._queries)
        for w in watches:
            w.cancel()

    def dispatch(self, changes: list[Change]) -> None:
        """Deliver a committed batch to table watches and re-check watched queries."""
        if not changes:
            return
        with self._lock:
            table_watches = list(self._tables)
            queries = list(self._queries.items())
        for tw, table in table_watches:
            mine = changes if table is None else [c for c in changes if c.table == table]
            if mine:
                tw._deliver(mine)
        touched = {c.table.lower() for c in changes}
        for qw, q in queries:
            # Only queries reading a changed table can have a different result.
            if not touched & q.tables:
                continue
            rows, read = self._run_query(q.sql, q.params)
            if rows != q.rows:
                with self._lock:
                    if qw in self._queries:
                        self._queries[qw] = _WatchedQuery(q.sql, q.params, rows, read)
                qw._deliver(rows)
