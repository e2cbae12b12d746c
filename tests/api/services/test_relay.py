"""The cross-process broadcast relay (:meth:`SyncService.relay`) on a PostgreSQL store that goes
away: the broadcast is skipped with one log line naming the outage (receivers pull what they
missed: broadcasts never move a cursor), not an exception no one retrieves."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from lakesync.api.metrics import GatewayMetrics
from lakesync.api.services.hub import Connection, Hub
from lakesync.api.services.sync import SyncService
from lakesync.config import StoreConfig
from lakesync.hlc import HLC
from lakesync.hotlog.factory import open_store
from lakesync.hotlog.records import LogNotice
from tests.api.helpers import make_settings
from tests.pg_cluster import private_postgres

pytestmark = [pytest.mark.postgres]


def test_a_relay_that_meets_a_store_outage_skips_its_broadcast_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[bytes] = []

    async def send(frame: bytes) -> None:
        sent.append(frame)

    async def close(code: int, reason: str) -> None:
        raise AssertionError(f"the receiver was closed: {code} {reason}")

    with private_postgres() as pg:
        store = open_store(pg.dsn, tmp_path, HLC(), "lakesync", StoreConfig(pg_pool_timeout=2))
        hub = Hub(0)
        service = SyncService(store, make_settings(tmp_path), GatewayMetrics(), hub)

        async def scenario() -> None:
            conn = Connection("gw1", "alice", {"sub": "alice"}, 0, send, close, False)
            hub.add(conn)
            conn.accepted.set()
            pg.stop("fast")
            try:
                await service.relay(LogNotice("gw1", 0, 5, "another process"))
            finally:
                assert conn.task is not None
                conn.task.cancel()

        try:
            with caplog.at_level(logging.WARNING):
                asyncio.run(scenario())
        finally:
            pg.start()
            store.close()
    lines = [r for r in caplog.records if "broadcast" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert "skipped" in lines[0].getMessage()
    assert "hot-log store unavailable" in lines[0].getMessage()
    assert lines[0].exc_info is None  # one line, no traceback
    assert sent == []
