"""The poller: a full gateway makes it wait and retry, never drop; cursors follow chunks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from lakesync.api.services.connectors import GatewaySink
from lakesync.connector_specs import connector_client_id
from lakesync.connectors import Chunk, Poller, Source
from lakesync.schema import TableSchema, parse_schema
from tests.connectors.conftest import GatewayUnderTest


class Numbers(Source):
    """``chunks`` chunks of ``size`` rows each; the cursor counts chunks."""

    def __init__(self, chunks: int, size: int) -> None:
        self.chunks, self.size = chunks, size

    async def schemas(self) -> Sequence[TableSchema]:
        return [parse_schema({"table": "nums", "columns": [{"name": "n", "type": "number"}]})]

    async def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
        for c in range(int(cursor.get("done", 0)), self.chunks):
            rows = {f"r{c}-{i}": {"n": c * self.size + i} for i in range(self.size)}
            yield Chunk("nums", rows, cursor={"done": c + 1})


def test_backpressure_is_waited_out_and_nothing_is_dropped(tmp_path: Path) -> None:
    gateway = GatewayUnderTest(tmp_path, backpressure_bytes=1)
    sink = GatewaySink(gateway.service, gateway.store, "gw1", "nums")
    poller = Poller("nums", Numbers(4, 10), sink, connector_client_id("nums"), 60, 0.02)

    async def flusher() -> None:
        # The landing flusher's part: once the poller waits, mark the log flushed.
        while poller.status.state != "idle" or poller.status.polls == 0:
            if poller.status.backpressure_waits:
                head = await anyio.to_thread.run_sync(gateway.store.head)
                await anyio.to_thread.run_sync(gateway.store.mark_flushed, head)
            await asyncio.sleep(0.01)

    async def main() -> int:
        flushing = asyncio.create_task(flusher())
        pushed = await poller.poll_once()
        await flushing
        return pushed

    try:
        assert asyncio.run(main()) == 40
        assert poller.status.backpressure_waits >= 1  # chunk 2 found the log full and waited
        assert {r["n"] for r in gateway.rows("nums").values()} == set(range(40))
        assert gateway.store.list_docs("gw1", "connector-cursor")["nums"] == {"cursor": {"done": 4}}
    finally:
        gateway.store.close()


def test_a_failing_source_keeps_what_it_stored_and_its_error(gateway: GatewayUnderTest) -> None:
    class Failing(Numbers):
        async def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
            async for chunk in super().poll(cursor):
                yield chunk
                raise ConnectionError("source went away")

    poller = gateway.poller("nums", Failing(3, 5))
    with pytest.raises(ConnectionError):
        asyncio.run(poller.poll_once())
    assert poller.status.last_error == "ConnectionError: source went away"
    assert (poller.status.failed_polls, len(gateway.rows("nums"))) == (1, 5)
    assert gateway.poll(Numbers(3, 5), name="nums") == 10  # resumes after the stored chunk
