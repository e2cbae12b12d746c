"""A first sync reports its progress: rows applied and checkpoint bytes received so far, after
each checkpoint frame and pulled page, growing to the rows the replica got. Against a real
gateway over HTTP (:mod:`tests.client.client_thread_gateway`) whose checkpoint has many frames."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from lakesync.client import AsyncLakeSyncClient, SyncProgress, SyncReport
from tests.api.helpers import delta, token
from tests.client.client_thread_gateway import TODOS, ThreadGateway

ROWS = 300  # in the checkpoint
LATER = 5  # pushed after it: pulled


def _published(gateway: ThreadGateway) -> None:
    gateway.admin_push(*(delta("INSERT", f"r{i}", "root", owner="o", title=f"todo {i}",
                               done=False) for i in range(ROWS)))
    gateway.checkpoint_and_trim()  # 500-byte chunks: many frames
    gateway.admin_push(*(delta("INSERT", f"later{i}", "root", owner="o", title="later",
                               done=True) for i in range(LATER)))


def _check(seen: list[SyncProgress], report: SyncReport) -> None:
    stages = [p.stage for p in seen]
    checkpoint = [p for p in seen if p.stage == "checkpoint"]
    assert len(checkpoint) > 3, "one report per frame"
    assert stages == sorted(stages), "the checkpoint, then the pulled pages"
    for before, after in itertools.pairwise(seen):
        assert after.rows > before.rows and after.bytes >= before.bytes
    assert checkpoint[-1].rows == ROWS
    assert checkpoint[0].bytes > 0
    assert seen[-1].rows == ROWS + LATER == report.pulled
    assert seen[-1].bytes == checkpoint[-1].bytes  # pulled pages count no bytes


def test_a_first_sync_reports_rows_and_bytes_so_far(
    thread_gateway: ThreadGateway, tmp_path: Path
) -> None:
    _published(thread_gateway)
    seen: list[SyncProgress] = []
    with thread_gateway.client(tmp_path / "a.db", "alice") as client:
        report = client.sync(on_progress=seen.append)
        assert client.query("select count(*) as n from todos") == [{"n": ROWS + LATER}]
        seen_again: list[SyncProgress] = []
        client.sync(on_progress=seen_again.append)
    _check(seen, report)
    assert seen_again == []  # nothing new to pull


def test_the_async_client_reports_the_same(thread_gateway: ThreadGateway, tmp_path: Path) -> None:
    _published(thread_gateway)
    seen: list[SyncProgress] = []

    async def main() -> SyncReport:
        async with AsyncLakeSyncClient(
            str(tmp_path / "a.db"), url=thread_gateway.url, gateway_id="gw1",
            token=token("alice"), schemas=[TODOS],
        ) as client:
            return await client.sync(on_progress=seen.append)

    _check(seen, asyncio.run(main()))
