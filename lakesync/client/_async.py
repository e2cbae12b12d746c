"""The asyncio twin of :class:`LakeSyncClient`: the same replica, awaitable methods."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Unpack

from lakesync.client._actions import ActionRecord
from lakesync.client._core import SyncProgressHandler, SyncReport
from lakesync.client._session import ClientOptions, ClientSession, Params
from lakesync.client._store import DeadLetter
from lakesync.client._types import Change, Event, SyncStatus
from lakesync.client._watch import Watch
from lakesync.schema import TableSchema

if TYPE_CHECKING:
    import pandas  # type: ignore[import-untyped]
    import pyarrow

__all__ = ["AsyncLakeSyncClient"]


class AsyncLakeSyncClient:
    """The asyncio client: the replica of a :class:`LakeSyncClient`, with awaitable methods.

    Takes the same arguments as :class:`LakeSyncClient` and raises the same errors. Network
    work (sync, actions, the WebSocket and its broadcasts) runs on the sync core's asyncio
    driver and the asyncio transport on the caller's event loop, which the client then belongs
    to; no thread is involved. Local writes and single-row reads are short SQLite calls and run
    inline (a write is committed when its coroutine returns); SQL queries, whose cost depends on
    the query, and applying pulled pages run in a worker thread so the loop stays responsive.
    Watch and event callbacks for remote changes run on the loop. Watches are iterated with
    ``async for``::

        async with AsyncLakeSyncClient("app.db", url=..., gateway_id="gw1", token=t) as c:
            async for changes in c.watch("todos"):
                ...
    """

    def __init__(self, path: str, **options: Unpack[ClientOptions]) -> None:
        self._session = ClientSession(path, **options)
        self._auto: asyncio.Task[None] | None = None

    @property
    def client_id(self) -> str:
        """The client id (the token's ``sub``)."""
        return self._session.client_id

    async def insert(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change:
        """See :meth:`LakeSyncClient.insert`."""
        change = self._session.write("INSERT", table, row_id, values)
        assert change is not None  # an insert always changes the row
        return change

    async def update(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change | None:
        """See :meth:`LakeSyncClient.update`."""
        return self._session.write("UPDATE", table, row_id, values)

    async def upsert(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change | None:
        """See :meth:`LakeSyncClient.upsert`."""
        return self._session.write("UPSERT", table, row_id, values)

    async def delete(self, table: str, row_id: str) -> Change:
        """See :meth:`LakeSyncClient.delete`."""
        change = self._session.write("DELETE", table, row_id, {})
        assert change is not None  # a delete of a live row always changes it
        return change

    async def query(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        """See :meth:`LakeSyncClient.query` (in a worker thread)."""
        return await asyncio.to_thread(self._session.store.query, sql, params)

    async def get(self, table: str, row_id: str) -> dict[str, Any] | None:
        """See :meth:`LakeSyncClient.get`."""
        return self._session.get(table, row_id)

    async def to_arrow(self, sql: str, params: Params = ()) -> pyarrow.Table:
        """See :meth:`LakeSyncClient.to_arrow` (in a worker thread)."""
        return await asyncio.to_thread(self._session.to_arrow, sql, params)

    async def to_pandas(self, sql: str, params: Params = ()) -> pandas.DataFrame:
        """See :meth:`LakeSyncClient.to_pandas` (in a worker thread)."""
        return await asyncio.to_thread(self._session.to_pandas, sql, params)

    def on(self, kind: str, callback: Callable[[Event], None]) -> Callable[[], None]:
        """See :meth:`LakeSyncClient.on` (callbacks for remote events run on the loop)."""
        return self._session.on(kind, callback)

    async def dead_letters(self) -> list[DeadLetter]:
        """See :meth:`LakeSyncClient.dead_letters`."""
        return self._session.store.dead_letters()

    async def requeue_dead_letters(self) -> int:
        """See :meth:`LakeSyncClient.requeue_dead_letters`."""
        return self._session.requeue_dead_letters()

    def schemas(self) -> dict[str, TableSchema]:
        """See :meth:`LakeSyncClient.schemas`."""
        return self._session.store.schemas()

    async def sync(
        self,
        retries: int | None = None,
        on_progress: SyncProgressHandler | None = None,
        *,
        raise_on_rejected: bool = False,
    ) -> SyncReport:
        """See :meth:`LakeSyncClient.sync` (``on_progress`` is called on this event loop)."""
        return await self._session.sync(retries, on_progress, raise_on_rejected)

    async def execute_action(
        self,
        connector: str,
        action_type: str,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> ActionRecord:
        """See :meth:`LakeSyncClient.execute_action`."""
        return await self._session.execute_action(
            connector, action_type, params, idempotency_key
        )

    async def run_actions(self, retries: int | None = None) -> int:
        """See :meth:`LakeSyncClient.run_actions`."""
        return await self._session.run_actions(retries)

    def action(self, action_id: str) -> ActionRecord | None:
        """See :meth:`LakeSyncClient.action`."""
        return self._session.actions.get(action_id)

    def watch(
        self, table: str | None = None, callback: Callable[[list[Change]], None] | None = None
    ) -> Watch[list[Change]]:
        """See :meth:`LakeSyncClient.watch`: without ``callback``, an async iterator."""
        return self._session.watchers.watch_table(table, callback)

    def watch_query(
        self,
        sql: str,
        params: Params = (),
        callback: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> Watch[list[dict[str, Any]]]:
        """See :meth:`LakeSyncClient.watch_query`: without ``callback``, an async iterator."""
        return self._session.watchers.watch_query(sql, params, callback)

    def start_auto_sync(self, interval: float = 5.0) -> None:
        """See :meth:`LakeSyncClient.start_auto_sync`; the loop is a task of the running loop."""
        if self._auto is None:
            self._session.start_auto_sync()
            self._auto = asyncio.get_running_loop().create_task(self._session.auto_sync(interval))

    async def stop_auto_sync(self) -> None:
        """See :meth:`LakeSyncClient.stop_auto_sync`."""
        auto, self._auto = self._auto, None
        if auto is not None:
            self._session.stop_auto_sync()
            await auto

    @property
    def status(self) -> SyncStatus:
        """See :attr:`LakeSyncClient.status`."""
        return self._session.status()

    @property
    def queue_depth(self) -> int:
        """See :attr:`LakeSyncClient.queue_depth`."""
        return self._session.store.queue_depth()

    async def close(self) -> None:
        """See :meth:`LakeSyncClient.close`."""
        await self.stop_auto_sync()
        if not self._session.store.closed:
            await self._session.close_network()
        self._session.store.close()

    async def __aenter__(self) -> AsyncLakeSyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
