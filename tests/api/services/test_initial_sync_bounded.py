"""A checkpoint stream holds a bounded number of chunks, whatever the checkpoint's size.

The gateway reads a stored chunk, filters and encodes it, and hands the frame to the response;
it reads at most one chunk ahead of the frame being sent. Counted here on the real SQLite store
(its chunk reads) while a slow reader takes the frames one at a time: the chunks read but not
yet taken never exceed 2, for a checkpoint of a few dozen chunks as for one of several hundred,
with and without sync rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.api.services.initial_sync import open_checkpoint
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.checkpoint_builder import write_checkpoint
from lakesync.merge import Cell, RowState
from lakesync.views import RowKey, RowRecord
from lakesync.wsframes import decode_response
from tests.api.helpers import auth, make_settings, now_hlc, token

AHEAD = 2
"""Chunks a stream may hold: the one being sent and the one read ahead."""

RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        }
    ],
}


class CountingStore(SqliteHotLog):
    """The SQLite store, counting the checkpoint chunks it has handed out and the per-chunk
    look-ups of the rows a client wrote."""

    chunk_reads = 0
    written_lookups = 0

    def checkpoint_chunk(self, gateway_id: str, upto: int, seq: int) -> bytes | None:
        self.chunk_reads += 1
        return super().checkpoint_chunk(gateway_id, upto, seq)

    def rows_written_among(
        self, gateway_id: str, client_id: str, keys: Sequence[RowKey]
    ) -> set[RowKey]:
        self.written_lookups += 1
        return super().rows_written_among(gateway_id, client_id, keys)


def _rows(n: int, hlc: int) -> Iterator[tuple[RowKey, RowRecord]]:
    """``n`` merged rows, every other one alice's."""
    for i in range(n):
        owner = "alice" if i % 2 == 0 else "bob"
        cells = {"owner": Cell(owner, hlc + i, owner), "title": Cell(f"t{i}", hlc + i, owner)}
        yield ("todos", f"r{i:06}"), RowRecord(RowState(cells, (hlc + i, owner)), hlc + i)


async def _read(service: Any, store: CountingStore, gw: str) -> tuple[list[int], int, int]:
    """Take alice's frames slowly: after each, the chunks read beyond those taken; the deltas
    received; the chunks read in all."""
    opened = await open_checkpoint(service, gw, {"sub": "alice"}, whole_rows=False)
    start = store.chunk_reads
    held: list[int] = []
    taken = received = 0
    async for frame in opened.frames:
        taken += 1
        received += len(decode_response(frame[4:])[0])
        await anyio.sleep(0.002)  # a slow client: the reader must not run ahead meanwhile
        held.append(store.chunk_reads - start - taken)
    return held, received, store.chunk_reads - start


@pytest.mark.parametrize("rules", [False, True], ids=["no-rules", "rules"])
def test_a_stream_holds_at_most_two_chunks_whatever_its_size(
    tmp_path: Path, rules: bool
) -> None:
    store = CountingStore(tmp_path / "hot.sqlite3", HLC())
    try:
        with TestClient(create_app(make_settings(tmp_path), store=store)) as client:
            service = client.app.state.service
            for gw, rows in (("small", 60), ("large", 1_200)):
                if rules:
                    r = client.post(
                        f"/v1/admin/sync-rules/{gw}",
                        json=RULES,
                        headers=auth(token("root", gw, role="admin")),
                    )
                    assert r.status_code == 200, r.text
                built = write_checkpoint(store, gw, now_hlc(), _rows(rows, now_hlc(-1000)), 500)
                assert built is not None and built.chunks >= rows // 10
                held, received, reads = anyio.run(_read, service, store, gw)
                # Every chunk was read once, and never more than AHEAD beyond the frames taken.
                assert len(held) == built.chunks == reads
                assert max(held) <= AHEAD - 1, held
                # Without rules every row; under rules alice's half, its state alone (a row a
                # client sees comes without an eviction in a checkpoint).
                assert received == (rows // 2 if rules else rows)
        # alice wrote nothing: the stream asked the store once, not once per chunk.
        assert store.written_lookups == 0
    finally:
        store.close()
