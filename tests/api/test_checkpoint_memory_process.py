"""A real gateway process streams checkpoints with memory bounded whatever their size.

Two checkpoints (of rows merged here: 10,000 rows on one gateway id, 100,000 on another) are
written into a PostgreSQL store before the gateway process starts (as its lake job would), so
the process never held the rows. Its RSS is sampled from a fresh baseline while a client
downloads each whole stream: the growth must be a small part of the large stream's size
(holding the stream would take all of it), and ten times the rows must not grow it by more
than a few chunks (a gateway whose memory followed the row count would grow tenfold).
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.lakehouse.checkpoint_builder import BuiltCheckpoint, write_checkpoint
from lakesync.merge import RowState, apply_delta
from lakesync.views import RowRecord
from tests.api.helpers import auth, now_hlc, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.gateway_process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SMALL, LARGE = 10_000, 100_000
MiB = 2**20


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _checkpoint(store: PostgresHotLog, gateway_id: str, n: int) -> BuiltCheckpoint:
    """Publish a checkpoint of ``n`` rows (about 300 bytes each on the wire)."""
    hlc = now_hlc()
    rows = []
    for i in range(n):
        state = RowState()
        apply_delta(
            state,
            RowDelta.create(
                "INSERT",
                "todos",
                f"row-{i:07}",
                "alice",
                {"owner": "alice", "title": f"task {i} " + "x" * 150, "n": i},
                hlc + i,
            ),
        )
        rows.append((("todos", f"row-{i:07}"), RowRecord(state, hlc + n + i)))
    built = write_checkpoint(store, gateway_id, hlc + 2 * n, rows)
    assert built is not None and built.rows == n
    return built


def _stream(http: httpx.Client, url: str, gateway_id: str, pid: int) -> tuple[int, int]:
    """Download a gateway's checkpoint: (bytes, peak RSS growth in bytes over the moment
    before)."""
    before = _rss_kib(pid)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_kib(pid))
            done.wait(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    size = 0
    try:
        headers = auth(token("alice", gw=gateway_id))
        with http.stream("GET", f"{url}/v1/sync/{gateway_id}/checkpoint", headers=headers) as r:
            assert r.status_code == 200
            for chunk in r.iter_bytes():
                size += len(chunk)
    finally:
        done.set()
        sampler.join()
    return size, (peak[0] - before) * 1024


def test_streaming_100k_rows_keeps_the_gateways_memory_bounded(tmp_path: Path) -> None:
    require_postgres()
    schema = fresh_pg_schema()
    store = PostgresHotLog(PG_DSN, HLC(), schema=schema)
    try:
        small = _checkpoint(store, "small", SMALL)
        large = _checkpoint(store, "large", LARGE)
        env = {
            "LAKESYNC_STORE_URL": PG_DSN,
            "LAKESYNC_PG_SCHEMA": schema,
            "LAKESYNC_FLUSH_INTERVAL": "0",
        }
        with ServerProcess(tmp_path / "gw", env) as gw, httpx.Client(timeout=300) as http:
            assert gw.proc is not None
            pid = gw.proc.pid
            # Warm up the route (imports, pools, the first chunks' buffers) before measuring.
            _stream(http, gw.url, "small", pid)
            small_size, small_growth = _stream(http, gw.url, "small", pid)
            large_size, large_growth = _stream(http, gw.url, "large", pid)
            print(
                f"\ngateway RSS growth: {small_size / MiB:.1f} MiB stream ({small.chunks} chunks)"
                f" +{small_growth / MiB:.1f} MiB; {large_size / MiB:.1f} MiB stream"
                f" ({large.chunks} chunks) +{large_growth / MiB:.1f} MiB"
            )
            assert large_size > 20 * MiB and large_size > 8 * small_size
            assert large_growth < large_size / 4, (large_growth, large_size)
            # Ten times the rows: at most a few chunks' worth (256 KiB each) more.
            assert large_growth < small_growth + 4 * MiB, (small_growth, large_growth)
    finally:
        store.close()
        drop_pg_schema(schema)
