"""Benchmark shipping: N changed rows (default 100,000) from the lake into PostgreSQL and MariaDB.

Usage: ``.venv/bin/python -m bench.materialise_bench [--rows N] [--data-dir D]``
(DSNs from ``LAKESYNC_TEST_PG_DSN`` / ``LAKESYNC_TEST_MYSQL_DSN``; each run ships into a fresh
database it creates and drops).

Lands N inserted rows, runs the pipeline once (not timed), then times ``materialise`` into each
destination alone: the change-set query on Spark, the executors' JDBC load into the staging
table and the set-based upsert, on local Spark. Prints rows/s per destination (targets: 50,000
rows/s into PostgreSQL, 20,000 into MariaDB). A second run shows the cost of an empty change set.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pymysql

from bench.pipeline_bench import BASE_HLC, SCHEMA, ListHotLog, make_deltas
from destinations.factory import mysql_params
from lakehouse.bootstrap import bootstrap
from lakehouse.catalog import open_catalog
from lakehouse.landing import LandingFlusher
from lakehouse.materialise import materialise
from lakehouse.runner import run_pipeline
from lakehouse.settings import LakeSettings
from lakehouse.spark import spark_session
from lakesync.config import Config, GatewayConfig
from lakesync.destinations import DestinationSpec

PG_DSN = os.environ.get("LAKESYNC_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_DSN = os.environ.get("LAKESYNC_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/test")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="lakesync-bench-"))
    settings = bootstrap(LakeSettings.from_env(data_dir))
    log = ListHotLog()
    log.extend(make_deltas(args.rows, args.rows, random.Random(42), BASE_HLC))
    LandingFlusher(open_catalog(settings), log, batch_size=250_000).flush()
    t = time.perf_counter()
    run_pipeline(settings=settings, schemas=[SCHEMA], tests=False)
    print(f"pipeline (not counted) {time.perf_counter() - t:8.1f} s")
    spark = spark_session(settings)

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    my = pymysql.connect(**mysql_params(MYSQL_DSN))  # type: ignore[arg-type]
    with my.cursor() as cur:
        cur.execute(f"create database `{name}`")
    urls = {
        "postgres": urlunsplit(urlsplit(PG_DSN)._replace(path=f"/{name}")),
        "mysql": urlunsplit(urlsplit(MYSQL_DSN)._replace(path=f"/{name}")),
    }
    try:
        for kind, url in urls.items():
            spec = DestinationSpec(kind, url, "bench", delete="soft", name=kind)  # type: ignore[arg-type]
            config = Config(data_dir=data_dir, jwt_secrets=[], destinations={kind: spec},
                            gateways={"bench": GatewayConfig("bench", [SCHEMA])})
            for attempt in ("first", "again"):
                t = time.perf_counter()
                [result] = materialise(settings, config, spark=spark)
                wall = time.perf_counter() - t
                if result.error:
                    raise SystemExit(f"{kind}: {result.error}")
                rate = result.rows / wall if result.rows else 0.0
                steps = ", ".join(f"{k} {v:.2f} s" for k, v in result.steps.items())
                print(f"{kind:<8} {attempt:<5} {result.rows:>9,} rows  {wall:7.2f} s  "
                      f"{rate:>10,.0f} rows/s  ({steps})")
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'drop database "{name}" with (force)')
        with my.cursor() as cur:
            cur.execute(f"drop database `{name}`")
        my.close()


if __name__ == "__main__":
    main()
