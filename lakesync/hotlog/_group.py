"""Group commit: one writer thread runs the store's write transactions, many at a time.

Callers queue an operation and wait. The writer takes everything queued (up to
:data:`MAX_GROUP` operations) into one transaction: each operation runs under a savepoint, so one
that fails rolls back alone and the others go on, then one commit (one fsync) covers them all,
and only then is each caller answered. Concurrent pushes thus share a commit while
"acknowledged" still means "durable".
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

__all__ = ["MAX_GROUP", "GroupCommit"]

C = TypeVar("C")
T = TypeVar("T")

MAX_GROUP = 256
"""Operations per transaction at most."""

_STOP = object()

_Item = tuple[Callable[[Any], Any], "concurrent.futures.Future[Any]"]
_Result = tuple["concurrent.futures.Future[Any]", Any, BaseException | None]


class GroupCommit(Generic[C]):
    """The writer thread of a store (see module docstring).

    ``connection`` lends the writer a connection for one group (it must not be in a
    transaction), ``begin`` opens the group's transaction and takes the store's write lock (so
    every row lock of the group is taken under it: groups of several processes sharing a
    store cannot deadlock), ``rollback``
    ends a failed one (whatever state the connection is left in), ``committed`` runs after
    each durable commit and ``closed`` is the error a write after :meth:`close` raises.
    """

    def __init__(
        self,
        name: str,
        connection: Callable[[], AbstractContextManager[C]],
        begin: Callable[[C], object],
        rollback: Callable[[C], None],
        committed: Callable[[], None] = lambda: None,
        closed: Callable[[], Exception] = lambda: RuntimeError("hot log is closed"),
    ) -> None:
        self.groups_committed = 0
        self._connection = connection
        self._begin = begin
        self._rollback = rollback
        self._committed = committed
        self._closed_error = closed
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def write(self, op: Callable[[C], T]) -> T:
        """Run ``op`` in a write transaction; its result once the commit is durable, or the
        error it (or the commit) raised, with its writes rolled back."""
        if self._closed:
            raise self._closed_error()
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put((op, fut))
        return fut.result()

    def close(self) -> None:
        """Finish the queued operations and stop the writer."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            group = [first]
            while len(group) < MAX_GROUP:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    self._queue.put(_STOP)
                    break
                group.append(item)
            self._commit(group)

    def _commit(self, group: list[_Item]) -> None:
        results: list[_Result] = []
        try:
            with self._connection() as conn:
                try:
                    self._transaction(conn, group, results)
                except BaseException:
                    self._rollback(conn)
                    raise
        except Exception as exc:
            for _, fut in group:
                fut.set_exception(exc)
            return
        self.groups_committed += 1
        self._committed()
        for fut, value, error in results:
            if error is None:
                fut.set_result(value)
            else:
                fut.set_exception(error)

    def _transaction(self, conn: Any, group: list[_Item], results: list[_Result]) -> None:
        self._begin(conn)
        for op, fut in group:
            conn.execute("SAVEPOINT op")
            try:
                value = op(conn)
            except Exception as exc:  # the operation fails alone; the group goes on
                conn.execute("ROLLBACK TO SAVEPOINT op")
                conn.execute("RELEASE SAVEPOINT op")
                results.append((fut, None, exc))
            else:
                conn.execute("RELEASE SAVEPOINT op")
                results.append((fut, value, None))
        conn.execute("COMMIT")
