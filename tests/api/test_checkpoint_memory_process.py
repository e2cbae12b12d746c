"""A real gateway process streams a 100,000-row checkpoint with bounded memory.

The checkpoint (of rows merged here) is written into a PostgreSQL store before the gateway
process starts (as its lake job would), so the process never held the rows: its RSS is sampled
from a fresh baseline while a client downloads the whole stream, and must grow by a small part
of the stream's size (holding the stream would take all of it).
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from api.store.postgres import PostgresHotLog
from lakehouse.checkpoints import write_checkpoint
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.merge import RowState, apply_delta
from lakesync.views import RowRecord
from tests.api.conftest import drop_pg_schema, fresh_pg_schema
from tests.api.helpers import auth, now_hlc, token
from tests.conftest import PG_DSN, require_postgres
from tests.gateway_process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROWS = 100_000


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_streaming_100k_rows_keeps_the_gateways_memory_bounded(tmp_path: Path) -> None:
    require_postgres()
    schema = fresh_pg_schema()
    store = PostgresHotLog(PG_DSN, HLC(), schema=schema)
    try:
        hlc = now_hlc()
        rows = []
        for i in range(ROWS):
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
            rows.append((("todos", f"row-{i:07}"), RowRecord(state, hlc + ROWS + i)))
        built = write_checkpoint(store, "gw1", hlc + 2 * ROWS, rows)
        assert built is not None and built.rows == ROWS
        del rows
        env = {
            "LAKESYNC_STORE_URL": PG_DSN,
            "LAKESYNC_PG_SCHEMA": schema,
            "LAKESYNC_FLUSH_INTERVAL": "0",
        }
        with ServerProcess(tmp_path / "gw", env) as gw, httpx.Client(timeout=300) as http:
            assert gw.proc is not None
            pid = gw.proc.pid
            headers = auth(token("alice"))
            # Warm up the route (imports, pools) on a small request before the baseline.
            assert http.get(
                f"{gw.url}/v1/sync/gw1/pull",
                params={"since": str(built.position), "clientId": "alice"},
                headers=headers,
            ).is_success
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
            with http.stream("GET", f"{gw.url}/v1/sync/gw1/checkpoint", headers=headers) as r:
                assert r.status_code == 200
                for chunk in r.iter_bytes():
                    size += len(chunk)
            done.set()
            sampler.join()
            growth = peak[0] - before
            print(
                f"\nstream {size / 2**20:.1f} MiB in {built.chunks} chunks; gateway RSS "
                f"{before} KiB before, peak +{growth} KiB"
            )
            assert size > 20 * 2**20
            assert growth * 1024 < size / 4, (growth, size)
    finally:
        store.close()
        drop_pg_schema(schema)
