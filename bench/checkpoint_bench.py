"""Initial sync of a fresh client: through the checkpoint vs a plain pull from 0.

A real ``python -m lakesync.api`` process on a PostgreSQL store holds N rows (default 100,000) of
one
table. A fresh :class:`lakesync.client.LakeSyncClient` (SQLite replica on disk) first syncs while
the
gateway has no checkpoint (a plain pull from ``since=0``, pages of 10,000); then the benchmark
publishes the store's rows as a checkpoint (as the gateway's lake job does after a pipeline run,
:func:`lakesync.lakehouse.checkpoint_builder.write_checkpoint`, on the same store) and a second
fresh client syncs through it. Printed: rows/s of both (wall time of ``sync()``, replica writes
included; and the CPU seconds the client and the gateway process spent, the figure to compare on a
shared machine), and the checkpoint stream alone (download and decode, no replica): rows/s and
MiB/s. With ``--rules`` the gateway has the rule ``owner = jwt:sub`` and also holds N/10 rows of
another owner: the client must end with exactly its N rows (filtered at serve time).

Run from the repository root: ``.venv/bin/python -m bench.checkpoint_bench [--rows N] [--rules]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import httpx
import msgspec

from lakesync.api.store.postgres import PostgresHotLog
from lakesync.client import LakeSyncClient
from lakesync.client._auth import TokenProvider
from lakesync.client.transport import HttpTransport
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.lakehouse.checkpoint_builder import write_checkpoint
from tests.api.conftest import drop_pg_schema, fresh_pg_schema
from tests.api.helpers import auth, now_hlc, token
from tests.conftest import PG_DSN
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

TODOS = {
    "table": "todos",
    "columns": [
        {"name": "owner", "type": "string"},
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
    ],
}
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


def fill(url: str, n: int, owner: str = "alice", first: int = 0) -> None:
    """Push ``n`` rows of ``owner`` (ids from ``first``) as ``owner``, in batches of 2,000
    (under the 1 MiB body limit)."""
    headers = auth(token(owner)) | {"Content-Type": "application/json"}
    hlc = now_hlc()
    with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
        for start in range(first, first + n, 2_000):
            deltas = [
                as_json(
                    RowDelta.create(
                        "INSERT",
                        "todos",
                        f"row-{i:07}",
                        owner,
                        {"owner": owner, "title": f"task {i}", "done": i % 2 == 0},
                        hlc + i,
                    )
                )
                for i in range(start, min(first + n, start + 2_000))
            ]
            r = c.post(
                "/v1/sync/gw1/push",
                content=msgspec.json.encode({"clientId": owner, "deltas": deltas}),
            )
            assert r.status_code == 200, r.text


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has spent so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def initial_sync(gw: ServerProcess, path: Path, n: int) -> tuple[float, float, float]:
    """A fresh client's first ``sync()``: (seconds, client CPU s, gateway CPU s); checks it
    holds the ``n`` rows."""
    assert gw.proc is not None
    with LakeSyncClient(
        str(path),
        url=gw.url,
        gateway_id="gw1",
        token=token("alice"),
        schemas=[TODOS],
        pull_limit=10_000,
        timeout=600,
    ) as c:
        gateway_cpu = cpu_seconds(gw.proc.pid)
        started, cpu = time.perf_counter(), time.process_time()
        c.sync()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        gateway_cpu = cpu_seconds(gw.proc.pid) - gateway_cpu
        assert c.query("select count(*) as n from todos") == [{"n": n}]
    return elapsed, cpu, gateway_cpu


def stream_only(url: str) -> tuple[float, int, int]:
    """Download and decode the checkpoint: (seconds, deltas, bytes)."""
    transport = HttpTransport(url, "gw1", TokenProvider(token("alice")))
    started = time.perf_counter()
    cp = transport.checkpoint()
    assert cp is not None
    deltas = sum(len(page) for page in cp.pages)
    elapsed = time.perf_counter() - started
    with httpx.Client(timeout=120) as c:
        size = len(c.get(f"{url}/v1/sync/gw1/checkpoint", headers=auth(token("alice"))).content)
    transport.close()
    return elapsed, deltas, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rules", action="store_true", help="owner = jwt:sub on the gateway")
    args = parser.parse_args()
    n = args.rows
    schema = fresh_pg_schema()
    env = {
        "LAKESYNC_STORE_URL": PG_DSN,
        "LAKESYNC_PG_SCHEMA": schema,
        "LAKESYNC_RATE_LIMIT": "0",
        "LAKESYNC_FLUSH_INTERVAL": "0",
    }
    store = None
    try:
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp) / "gw", env) as gw:
            admin = auth(token("root", role="admin"))
            if args.rules:
                assert httpx.post(
                    f"{gw.url}/v1/admin/sync-rules/gw1", json=RULES, headers=admin
                ).is_success
            fill(gw.url, n)
            if args.rules:
                # Rows alice must not receive: her replica holds exactly her n rows.
                fill(gw.url, n // 10, "bob", first=n)
            pull = initial_sync(gw, Path(tmp) / "pull.db", n)

            store = PostgresHotLog(PG_DSN, HLC(), schema=schema)
            page = store.read_all_rows("gw1")
            started = time.perf_counter()
            built = write_checkpoint(store, "gw1", page.head, sorted(page.rows.items()))
            build_s = time.perf_counter() - started
            assert built is not None
            checkpoint = initial_sync(gw, Path(tmp) / "checkpoint.db", n)
            stream_s, deltas, size = stream_only(gw.url)
    finally:
        if store is not None:
            store.close()
        drop_pg_schema(schema)
    mode = f"rules owner = jwt:sub, +{n // 10:,} rows of bob" if args.rules else "no rules"
    print(f"initial sync of {n:,} rows ({mode}; PostgreSQL store; replica on disk)")
    for label, (wall, cpu, gateway_cpu) in (
        ("plain pull from 0     ", pull),
        ("through the checkpoint", checkpoint),
    ):
        print(
            f"  {label} {wall:7.2f} s  {n / wall:10,.0f} rows/s  (CPU: client {cpu:.2f} s,"
            f" gateway {gateway_cpu:.2f} s; {n / cpu:,.0f} rows per client CPU-second)"
        )
    print(f"  load average {os.getloadavg()[0]:.1f}")
    print(
        f"  checkpoint stream only {stream_s:7.2f} s  {n / stream_s:10,.0f} rows/s"
        f"  {size / stream_s / 2**20:6.1f} MiB/s  ({deltas:,} deltas, {size / 2**20:.1f} MiB,"
        f" {built.chunks} chunks)"
    )
    print(f"  checkpoint written from the store's rows in {build_s:.2f} s (store side only)")


if __name__ == "__main__":
    main()
