"""The asyncio client has every public method of the sync client, with the same parameters, and
the ones that read the replica answer the same."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

from lakesync.client import AsyncLakeSyncClient, LakeSyncClient
from tests.api.helpers import token

TODOS = {"table": "todos", "columns": [{"name": "title", "type": "string"},
                                       {"name": "done", "type": "boolean"}]}
# Only the sync client has these: its blocking sync engine (internals) and connect (opens the
# WebSocket at once; the async client's first request opens it).
SYNC_ONLY = {"engine", "connect"}
# Async methods that register or read in-memory state at once, so they stay plain calls.
PLAIN = {"on", "schemas", "action", "watch", "watch_query", "start_auto_sync"}


def _public(cls: type) -> set[str]:
    return {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}


def test_the_async_client_has_every_method_of_the_sync_client() -> None:
    missing = _public(LakeSyncClient) - _public(AsyncLakeSyncClient) - SYNC_ONLY
    assert not missing, f"AsyncLakeSyncClient lacks {sorted(missing)}"


def test_each_method_takes_the_same_parameters_and_the_async_ones_are_awaitable() -> None:
    for name in sorted(_public(LakeSyncClient) - SYNC_ONLY):
        blocking = inspect.getattr_static(LakeSyncClient, name)
        awaitable = inspect.getattr_static(AsyncLakeSyncClient, name)
        if isinstance(blocking, property) or isinstance(awaitable, property):
            assert isinstance(blocking, property) and isinstance(awaitable, property), name
            continue
        if not callable(blocking):
            continue
        assert not inspect.iscoroutinefunction(blocking), name
        assert inspect.iscoroutinefunction(awaitable) == (name not in PLAIN), name
        params = inspect.signature(blocking).parameters
        async_params = inspect.signature(awaitable).parameters
        assert [(p.name, p.kind, p.default) for p in params.values()] == [
            (p.name, p.kind, p.default) for p in async_params.values()
        ], name


def test_the_async_readers_answer_as_the_sync_ones(tmp_path: Path) -> None:
    async def main() -> None:
        # No gateway: the readers work on the replica alone.
        kw = {"url": "http://127.0.0.1:9", "gateway_id": "gw1", "schemas": [TODOS],
              "token": token("alice")}
        async with AsyncLakeSyncClient(str(tmp_path / "a.db"), **kw) as c:
            seen: list[str] = []
            changed: list[str] = []
            stop = c.on("*", lambda e: seen.append(e.kind))
            c.watch("todos", lambda changes: changed.extend(x.row_id for x in changes))
            await c.insert("todos", "r1", {"title": "Buy milk", "done": False})
            assert changed == ["r1"]
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
