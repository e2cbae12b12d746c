"""Benchmark the SQL endpoint: queries on a small table through `lakesync sql-server`, warm.

Usage: ``.venv/bin/python -m bench.sql_endpoint_bench [--rows N] [--queries K] [--warmup W]``

Builds a throwaway lake with one ``analytics.todos`` table of N rows (default 100, written with
pyiceberg as the pipeline writes it), starts the Thrift server
(:class:`~lakesync.lakehouse.sql_server.SqlServer`, the pipeline's Spark settings), opens one
PyHive connection, runs W warm-up queries (default 20: the JVM's JIT and Spark's first plans),
then K queries (default 200) of each kind and prints p50/p99 per kind, the start-up time and the
machine's load (target: p50 ≤ 50 ms on a small table, warm).

Each query re-reads the table's metadata from the catalog (``cache-enabled=false``, so a
pipeline run shows at once): that read and Spark's planning and job scheduling for one task
make up most of a query's time.

Measured (2 cores shared with other jobs, load average 5 to 10, 100 rows, 100 queries): server
ready in 9.7 s; p50/p99 count(*) 151/519 ms, point lookup 92/213 ms, 20-row scan 67/167 ms.
The 50 ms target is not met on this machine. Turning the catalog cache on
(``cache-enabled=true``) or adaptive execution off did not move p50 beyond the noise (load 12):
the time is Spark's per-query planning and one-task job on a contended CPU, not the catalog.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.sql_server import SqlServer

QUERIES = {
    "count": "select count(*) from analytics.todos",
    "point": "select title from analytics.todos where row_id = 'r1'",
    "scan": "select row_id, title from analytics.todos order by row_id limit 20",
}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lake(root: Path, rows: int) -> LakeSettings:
    settings = LakeSettings.from_env(root, env={})
    bootstrap(settings)
    catalog = open_catalog(settings)
    catalog.create_namespace_if_not_exists("analytics")
    schema = pa.schema([pa.field("row_id", pa.string(), nullable=False),
                        pa.field("title", pa.string())])
    table = catalog.create_table("analytics.todos", schema=schema)
    table.append(pa.table({"row_id": [f"r{i}" for i in range(rows)],
                           "title": [f"title {i}" for i in range(rows)]}, schema=schema))
    return settings


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    from pyhive import hive

    with tempfile.TemporaryDirectory(prefix="lakesync-sql-bench-") as tmp:
        settings = _lake(Path(tmp) / "lake", args.rows)
        server = SqlServer(settings, port=_free_port())
        t0 = time.monotonic()
        with server:
            print(f"server ready in {time.monotonic() - t0:.1f} s at {server.url}")
            with hive.connect("127.0.0.1", server.port, username="bench") as con:
                cur = con.cursor()
                for i in range(args.warmup):
                    cur.execute(list(QUERIES.values())[i % len(QUERIES)])
                    cur.fetchall()
                for name, sql in QUERIES.items():
                    samples = []
                    for _ in range(args.queries):
                        start = time.perf_counter()
                        cur.execute(sql)
                        cur.fetchall()
                        samples.append((time.perf_counter() - start) * 1000)
                    print(f"{name:6s} ({args.rows} rows, {args.queries} queries): "
                          f"p50 {statistics.median(samples):.1f} ms, "
                          f"p99 {_pct(samples, 0.99):.1f} ms   [{sql}]")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
