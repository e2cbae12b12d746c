"""Where the clients' network work runs: the asyncio client on the caller's loop with no thread
of its own, the blocking client on the one loop thread it owns (lakesync.client._loop)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from lakesync.client import AsyncLakeSyncClient, Change, Event
from lakesync.client._loop import LoopThread
from tests.client.test_client_e2e import TODOS, make, wait_for
from tests.gateway_process import ServerProcess


def _lakesync_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("lakesync")}


def test_a_blocking_call_from_the_loop_thread_fails_instead_of_hanging() -> None:
    loop = LoopThread("lakesync-test")

    async def call_back_in() -> None:
        loop.run(asyncio.sleep(0))

    try:
        with pytest.raises(RuntimeError, match="deadlock"):
            loop.run(call_back_in())
        assert loop.run(asyncio.sleep(0, "still serving")) == "still serving"
    finally:
        loop.close()
    assert "lakesync-test" not in _lakesync_threads()


@pytest.mark.slow
def test_the_blocking_client_runs_sync_and_realtime_on_its_one_loop_thread(
    gateway: ServerProcess, gw_id: str
) -> None:
    before = _lakesync_threads()
    with (
        make(gateway, gw_id, "a") as a,
        make(gateway, gw_id, "b", transport="websocket") as b,
    ):
        where: dict[str, str] = {}
        b.on("synced", lambda e: where.setdefault("synced", threading.current_thread().name))
        b.watch("todos", lambda c: where.setdefault(c[0].origin, threading.current_thread().name))
        b.sync()
        a.insert("todos", "live", {"title": "hello"})
        a.sync()
        wait_for(lambda: "realtime" in where)
        # The broadcast's change, b's sync and both clients' connections: one thread each.
        assert where == {"synced": "lakesync-client", "realtime": "lakesync-client"}
        assert _lakesync_threads() - before == {"lakesync-client"}
    assert _lakesync_threads() == before  # closing stops the loop threads


@pytest.mark.slow
def test_the_async_client_syncs_and_receives_on_the_callers_loop(
    gateway: ServerProcess, gw_id: str
) -> None:
    before = _lakesync_threads()

    async def main() -> None:
        kw: dict[str, Any] = {"url": gateway.url, "gateway_id": gw_id, "schemas": [TODOS]}
        caller = threading.current_thread().name
        arrived = asyncio.Event()
        where: list[tuple[str, str]] = []

        def on_change(changes: list[Change]) -> None:
            where.append((changes[0].origin, threading.current_thread().name))
            arrived.set()  # an asyncio.Event: only safe on the loop's own thread

        def on_event(e: Event) -> None:
            where.append((e.kind, threading.current_thread().name))

        async with (
            AsyncLakeSyncClient(":memory:", token=gateway.token("a", gw_id), **kw) as a,
            AsyncLakeSyncClient(
                ":memory:", token=gateway.token("b", gw_id), transport="websocket", **kw
            ) as b,
        ):
            b.on("synced", on_event)
            b.watch("todos", on_change)
            await b.sync()
            await a.insert("todos", "live", {"title": "hello"})
            await a.sync()
            await asyncio.wait_for(arrived.wait(), 15)
            assert where == [("synced", caller), ("realtime", caller)]
            assert await b.get("todos", "live") == {"title": "hello"}
            assert _lakesync_threads() == before  # no thread of the client's own

    asyncio.run(main())


@pytest.mark.slow
def test_the_async_clients_auto_sync_is_a_task_of_the_callers_loop(
    gateway: ServerProcess, gw_id: str
) -> None:
    async def main() -> None:
        kw: dict[str, Any] = {"url": gateway.url, "gateway_id": gw_id, "schemas": [TODOS]}
        async with AsyncLakeSyncClient(":memory:", token=gateway.token("a", gw_id), **kw) as a:
            a.start_auto_sync(interval=60)  # a write wakes it long before the interval
            assert a.status.auto_sync
            await a.insert("todos", "r", {"title": "pushed by auto-sync"})
            deadline = asyncio.get_running_loop().time() + 15
            while a.queue_depth and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.02)
            assert a.queue_depth == 0
            await a.stop_auto_sync()
            assert not a.status.auto_sync
            assert _lakesync_threads() == before

    before = _lakesync_threads()
    asyncio.run(main())
