"""Client benchmarks: local write latency, remote apply throughput, end-to-end initial sync.

Run from the repository root: ``.venv/bin/python -m bench.client_bench`` (add ``--rows`` /
``--writes`` to change sizes).
The end-to-end part starts a gateway (``python -m lakesync.api``) on a free port with a throwaway
data
dir, seeds it with ``--rows`` rows over HTTP, then times a fresh client's ``sync()``; pass
``--url`` and ``--secret`` to use a running gateway instead, or ``--no-e2e`` to skip it.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from lakesync.client import LakeSyncClient
from lakesync.client._store import LocalStore
from lakesync.delta import RowDelta
from lakesync.hlc import HLC, encode
from lakesync.schema import parse_schema
from lakesync.tokens import mint_token
from lakesync.wire import encode_push
from tests.gateway_process import ServerProcess

SCHEMA = {
    "table": "items",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "qty", "type": "number"},
        {"name": "done", "type": "boolean"},
    ],
}


def _percentiles(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=100)
    return f"mean {statistics.fmean(samples):7.1f} µs  p50 {q[49]:7.1f} µs  p99 {q[98]:7.1f} µs"


def bench_writes(n: int, tmp: Path) -> None:
    """Local insert (data + cell clocks + outbox in one transaction) vs a raw sqlite insert."""
    with LakeSyncClient(str(tmp / "w.db"), client_id="bench", schemas=[SCHEMA]) as c:
        lat = []
        for i in range(n):
            t0 = time.perf_counter()
            c.insert("items", f"r{i}", {"title": f"item {i}", "qty": i, "done": i % 2 == 0})
            lat.append((time.perf_counter() - t0) * 1e6)
    raw = sqlite3.connect(tmp / "raw.db", isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=NORMAL")
    raw.execute(
        "CREATE TABLE items (row_id TEXT PRIMARY KEY, title TEXT, qty NUMERIC, done INTEGER)"
    )
    raw_lat = []
    for i in range(n):
        t0 = time.perf_counter()
        raw.execute("INSERT INTO items VALUES (?, ?, ?, ?)", (f"r{i}", f"item {i}", i, i % 2))
        raw_lat.append((time.perf_counter() - t0) * 1e6)
    raw.close()
    print(f"local insert with outbox ({n}):  {_percentiles(lat)}")
    print(f"raw sqlite insert ({n}):         {_percentiles(raw_lat)}")
    print(f"  overhead: {statistics.fmean(lat) / statistics.fmean(raw_lat):.1f}x the raw insert")


def bench_apply(n: int, tmp: Path) -> None:
    """Remote deltas applied through the merge, in pull-sized pages (1000)."""
    base = encode(1_700_000_000_000, 0)
    rows = max(1, n // 3)
    deltas = []
    for i in range(n):
        row = f"r{i % rows}"
        if i < rows:
            cols = {"title": f"t{i}", "qty": i, "done": False}
            deltas.append(RowDelta.create("INSERT", "items", row, "remote", cols, base + i))
        else:
            deltas.append(RowDelta.create("UPDATE", "items", row, "remote", {"qty": i}, base + i))
    store = LocalStore(str(tmp / "a.db"), [parse_schema(SCHEMA)])
    clock = HLC()
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        store.apply_remote(deltas[start : start + 1000], "remote", clock, ("gw", base + start))
    dt = time.perf_counter() - t0
    store.close()
    print(f"apply remote deltas ({n} on {rows} rows): {n / dt:10.0f} deltas/s ({dt:.2f} s)")


def bench_e2e(rows: int, url: str, secret: str, tmp: Path, transport: str) -> None:
    """Seed ``rows`` rows on the gateway, then time a fresh client's first sync."""
    gw = f"bench_{transport}"
    seed_token = mint_token(secret, sub=f"seeder-{transport}", gw=gw)
    clock = HLC()
    table = f"items_{transport}"
    with httpx.Client(timeout=120) as http:
        for start in range(0, rows, 2000):
            batch = [
                RowDelta.create(
                    "INSERT",
                    table,
                    f"r{i}",
                    f"seeder-{transport}",
                    {"title": f"item {i}", "qty": i, "done": i % 2 == 0},
                    clock.now(),
                )
                for i in range(start, min(rows, start + 2000))
            ]
            resp = http.post(
                f"{url}/v1/sync/{gw}/push",
                content=encode_push(f"seeder-{transport}", batch, None),
                headers={
                    "Authorization": f"Bearer {seed_token}",
                    "Content-Type": "application/json",
                },
            )
            resp.raise_for_status()
    token = mint_token(secret, sub=f"fresh-{transport}", gw=gw)
    with LakeSyncClient(
        str(tmp / f"fresh-{transport}.db"),
        url=url,
        gateway_id=gw,
        token=token,
        transport=transport,  # type: ignore[arg-type]
        pull_limit=5000,
    ) as c:
        t0, cpu = time.perf_counter(), time.process_time()
        c.sync()
        dt, cpu = time.perf_counter() - t0, time.process_time() - cpu
        got = c.query(f"select count(*) as n from {table}")[0]["n"]
    print(
        f"initial sync over {transport:9s} ({got} rows): {got / dt:10.0f} rows/s ({dt:.2f} s;"
        f" client CPU {cpu:.2f} s, load {os.getloadavg()[0]:.1f})"
    )


def main() -> None:
    """Parse arguments and print every figure."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--deltas", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--url")
    ap.add_argument("--secret", default="bench-secret-bench-secret-bench-secret")
    ap.add_argument("--no-e2e", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_writes(args.writes, tmp)
        bench_apply(args.deltas, tmp)
        if args.no_e2e:
            return
        if args.url:
            for tr in ("http", "websocket"):
                bench_e2e(args.rows, args.url, args.secret, tmp, tr)
        else:
            with ServerProcess(tmp / "gw", {"LAKESYNC_JWT_SECRET": args.secret}) as gateway:
                for tr in ("http", "websocket"):
                    bench_e2e(args.rows, gateway.url, args.secret, tmp, tr)


if __name__ == "__main__":
    main()
