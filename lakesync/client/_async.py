"""The asyncio twin of :class:`LakeSyncClient`: the same replica, awaitable methods."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lakesync.client._actions import ActionRecord
from lakesync.client._client import LakeSyncClient, Params
from lakesync.client._store import DeadLetter
from lakesync.client._sync import SyncReport
from lakesync.client._types import Change, Event, SyncStatus
from lakesync.client._watch import Watch
from lakesync.schema import TableSchema

if TYPE_CHECKING:
    import pandas  # type: ignore[import-untyped]
    import pyarrow

__all__ = ["AsyncLakeSyncClient"]


class AsyncLakeSyncClient:
    """Awaitable wrapper around a :class:`LakeSyncClient`; blocking work runs in a thread.

    Takes the same arguments as :class:`LakeSyncClient` and raises the same errors. Watches
    are iterated with ``async for``::

        async with AsyncLakeSyncClient("app.db", url=..., gateway_id="gw1", token=t) as c:
            async for changes in c.watch("todos"):
                ...
    """

    def __init__(self, path: str, **kwargs: Any) -> None:
        self.sync_client = LakeSyncClient(path, **kwargs)

    @property
    def client_id(self) -> str:
        """The client id (the token's ``sub``)."""
        return self.sync_client.client_id

    async def insert(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change:
        """See :meth:`LakeSyncClient.insert`."""
        return await asyncio.to_thread(self.sync_client.insert, table, row_id, values)

    async def update(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change | None:
        """See :meth:`LakeSyncClient.update`."""
        return await asyncio.to_thread(self.sync_client.update, table, row_id, values)

    async def upsert(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change | None:
        """See :meth:`LakeSyncClient.upsert`."""
        return await asyncio.to_thread(self.sync_client.upsert, table, row_id, values)

    async def delete(self, table: str, row_id: str) -> Change:
        """See :meth:`LakeSyncClient.delete`."""
        return await asyncio.to_thread(self.sync_client.delete, table, row_id)

    async def query(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        """See :meth:`LakeSyncClient.query`."""
        return await asyncio.to_thread(self.sync_client.query, sql, params)

    async def get(self, table: str, row_id: str) -> dict[str, Any] | None:
        """See :meth:`LakeSyncClient.get`."""
        return await asyncio.to_thread(self.sync_client.get, table, row_id)

    async def to_arrow(self, sql: str, params: Params = ()) -> pyarrow.Table:
        """See :meth:`LakeSyncClient.to_arrow`."""
        return await asyncio.to_thread(self.sync_client.to_arrow, sql, params)

    async def to_pandas(self, sql: str, params: Params = ()) -> pandas.DataFrame:
        """See :meth:`LakeSyncClient.to_pandas`."""
        return await asyncio.to_thread(self.sync_client.to_pandas, sql, params)

    def on(self, kind: str, callback: Callable[[Event], None]) -> Callable[[], None]:
        """See :meth:`LakeSyncClient.on` (the callback runs on the thread that syncs)."""
        return self.sync_client.on(kind, callback)

    async def dead_letters(self) -> list[DeadLetter]:
        """See :meth:`LakeSyncClient.dead_letters`."""
        return await asyncio.to_thread(self.sync_client.dead_letters)

    async def requeue_dead_letters(self) -> int:
        """See :meth:`LakeSyncClient.requeue_dead_letters`."""
        return await asyncio.to_thread(self.sync_client.requeue_dead_letters)

    def schemas(self) -> dict[str, TableSchema]:
        """See :meth:`LakeSyncClient.schemas`."""
        return self.sync_client.schemas()

    async def sync(self, retries: int | None = None) -> SyncReport:
        """See :meth:`LakeSyncClient.sync`."""
        return await asyncio.to_thread(self.sync_client.sync, retries)

    async def execute_action(
        self,
        connector: str,
        action_type: str,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> ActionRecord:
        """:meth:`LakeSyncClient.execute_action` in a worker thread."""
        return await asyncio.to_thread(
            self.sync_client.execute_action, connector, action_type, params, idempotency_key
        )

    async def run_actions(self, retries: int | None = None) -> int:
        """:meth:`LakeSyncClient.run_actions` in a worker thread."""
        return await asyncio.to_thread(self.sync_client.run_actions, retries)

    def action(self, action_id: str) -> ActionRecord | None:
        """:meth:`LakeSyncClient.action`."""
        return self.sync_client.action(action_id)

    def watch(self, table: str | None = None) -> Watch[list[Change]]:
        """Changed rows of ``table`` (None = all) as an async iterator of batches."""
        return self.sync_client.watch(table)

    def watch_query(self, sql: str, params: Sequence[Any] = ()) -> Watch[list[dict[str, Any]]]:
        """A query's rows as an async iterator: now, then after every change that alters them."""
        return self.sync_client.watch_query(sql, params)

    def start_auto_sync(self, interval: float = 5.0) -> None:
        """See :meth:`LakeSyncClient.start_auto_sync`."""
        self.sync_client.start_auto_sync(interval)

    async def stop_auto_sync(self) -> None:
        """See :meth:`LakeSyncClient.stop_auto_sync`."""
        await asyncio.to_thread(self.sync_client.stop_auto_sync)

    @property
    def status(self) -> SyncStatus:
        """See :attr:`LakeSyncClient.status`."""
        return self.sync_client.status

    @property
    def queue_depth(self) -> int:
        """See :attr:`LakeSyncClient.queue_depth`."""
        return self.sync_client.queue_depth

    async def close(self) -> None:
        """See :meth:`LakeSyncClient.close`."""
        await asyncio.to_thread(self.sync_client.close)

    async def __aenter__(self) -> AsyncLakeSyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
