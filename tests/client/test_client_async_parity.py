"""The asyncio client has every public method of the sync client, and the ones that read the
replica answer the same."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

from lakesync.client import AsyncLakeSyncClient, LakeSyncClient
from tests.api.helpers import token

TODOS = {"table": "todos", "columns": [{"name": "title", "type": "string"},
                                       {"name": "done", "type": "boolean"}]}
# Only the sync client has these: its sync engine (internals) and connect (opens the WebSocket
# at once; the async client's first request opens it).
SYNC_ONLY = {"engine", "connect"}


def _public(cls: type) -> set[str]:
    return {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}


def test_the_async_client_has_every_method_of_the_sync_client() -> None:
    missing = _public(LakeSyncClient) - _public(AsyncLakeSyncClient) - SYNC_ONLY
    assert not missing, f"AsyncLakeSyncClient lacks {sorted(missing)}"


def test_the_async_readers_answer_as_the_sync_ones(tmp_path: Path) -> None:
    async def main() -> None:
        # No gateway: the readers work on the replica alone.
        kw = {"url": "http://127.0.0.1:9", "gateway_id": "gw1", "schemas": [TODOS],
              "token": token("alice")}
        async with AsyncLakeSyncClient(str(tmp_path / "a.db"), **kw) as c:
            seen: list[str] = []
            stop = c.on("*", lambda e: seen.append(e.kind))
            await c.insert("todos", "r1", {"title": "Buy milk", "done": False})
            assert await c.get("todos", "r1") == {"title": "Buy milk", "done": False}
            assert await c.get("todos", "nope") is None
            table = await c.to_arrow("select row_id, title from todos")
            assert table.to_pylist() == [{"row_id": "r1", "title": "Buy milk"}]
            frame = await c.to_pandas("select row_id, done from todos")
            assert frame.to_dict("records") == [{"row_id": "r1", "done": False}]
            assert await c.dead_letters() == []
            assert await c.requeue_dead_letters() == 0
            assert set(c.schemas()) == {"todos"}
            stop()

    asyncio.run(main())
