"""Benchmark the scheduled pipeline: a cold run per process versus the warm worker, and freshness.

Usage: ``.venv/bin/python -m bench.pipeline_warm_bench [--deltas M] [--rounds K] [--fresh N]
[--no-cold]``

1. **cold vs warm**: the same increments of M deltas (default 10,000, landed through the real
   SQLite hot log and flusher) merged by ``lakesync pipeline run`` in a new process each time (what
   ``lakesync up`` did before the warm worker) and by one
   :class:`~lakesync.lakehouse.worker.PipelineWorker`
   (what it does now; its first run pays the start and is shown apart). Wall time per run, as
   ``lakesync up`` waits for it; the ratio is the figure to compare on a noisy machine.
   **CLI with lakesync up**: the same increments pushed to a real ``python -m lakesync.api`` and
   merged by ``lakesync pipeline run`` on its data dir, which hands the run to the gateway's warm
   worker (target at most 1.2 times the warm worker's run): the command's whole wall
   time, process start and the streamed progress included, over the warm run's. Measured at
   load 19-26 on 2 cores (``--deltas 2000 --rounds 2 --fresh 0 --no-cold``): warm 128.6 and
   42.4 s (median 85.5 s), the CLI with ``lakesync up`` 87.1 and 59.7 s (median 73.4 s):
   cli/warm 0.86. At that load the runs' spread dwarfs what the command adds (its start and
   imports, 1-2 s, and one HTTP stream).
2. **freshness** (``--fresh N``, default 5): a real ``python -m lakesync.api`` with flush and
pipeline
   intervals of 1 s; N times, push one row and poll ``analytics.<table>`` with DuckDB until it
   shows: push → visible p50 and max.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from lakesync.delta import RowDelta
from lakesync.errors import NotFoundError
from lakesync.hlc import HLC, encode
from lakesync.hotlog.factory import open_store
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.worker import PipelineWorker
from lakesync.schema import parse_schema
from lakesync.wire import encode_push

SCHEMA = {"table": "items", "columns": [
    {"name": "title", "type": "string"}, {"name": "qty", "type": "number"},
]}


def _increment(start: int, n: int, client: str = "bench") -> list[RowDelta]:
    return [
        RowDelta.create(
            op="INSERT", table="items", row_id=f"r{start + i}", client_id=client,
            columns={"title": f"item {start + i}", "qty": i}, hlc=encode(1_000 + start + i, 0),
        )
        for i in range(n)
    ]


def _cli_with_gateway(root: Path, deltas: int, rounds: int) -> list[float]:
    """``lakesync pipeline run`` wall times with ``lakesync up`` serving the data dir (the run
    handed to its worker), the same increments pushed through the gateway."""
    from tests.gateway_process import ServerProcess

    data = root / "gateway"
    times: list[float] = []
    with ServerProcess(data) as gw, httpx.Client(base_url=gw.url, timeout=120) as http:
        admin = {"Authorization": f"Bearer {gw.token('ops', 'gw1', role='admin')}"}
        user = {"Authorization": f"Bearer {gw.token('bench', 'gw1')}",
                "content-type": "application/json"}
        http.post("/v1/admin/schema/gw1", json=SCHEMA, headers=admin).raise_for_status()
        env = {**os.environ, "LAKESYNC_JWT_SECRET": gw.secret}
        env.pop("LAKESYNC_CONFIG", None)
        for k in range(rounds + 1):
            increment = _increment(k * deltas, deltas)
            for at in range(0, deltas, 1_000):
                http.post("/v1/sync/gw1/push", headers=user,
                          content=encode_push("bench", increment[at:at + 1_000], None),
                          ).raise_for_status()
            http.post("/v1/admin/flush/gw1", headers=admin).raise_for_status()
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "lakesync.cli", "pipeline", "run", "--data-dir", str(data)],
                check=True, env=env, cwd=root, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            times.append(time.perf_counter() - started)
            print(f"  cli with lakesync up run {k}: {times[-1]:6.1f} s", flush=True)
    return times


def cold_vs_warm(root: Path, deltas: int, rounds: int, cold_runs: bool = True) -> None:
    results: dict[str, list[float]] = {}
    for mode in ("cold", "warm") if cold_runs else ("warm",):
        data = root / mode
        settings = LakeSettings.from_env(data, env={})
        bootstrap(settings)
        catalog = open_catalog(settings)
        publish_schemas(catalog, [("gw1", parse_schema(SCHEMA))])
        store = open_store("sqlite", data, HLC())
        flusher = LandingFlusher(catalog, store, mark_flushed=store.mark_flushed)
        worker = PipelineWorker(data, data / "pipeline.log")
        env = {k: v for k, v in os.environ.items() if k != "LAKESYNC_CONFIG"}
        times: list[float] = []
        try:
            for k in range(rounds + 1):
                store.append("gw1", _increment(k * deltas, deltas))
                flusher.flush()
                started = time.perf_counter()
                if mode == "cold":
                    subprocess.run(
                        [sys.executable, "-m", "lakesync.cli", "pipeline", "run",
                         "--data-dir", str(data)],
                        check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    )
                else:
                    reply = worker.run()
                    assert reply is not None and reply.ok, reply
                times.append(time.perf_counter() - started)
                print(f"  {mode} run {k}: {times[-1]:6.1f} s", flush=True)
        finally:
            worker.close()
            store.close()
        results[mode] = times
    warm, cli = results["warm"], _cli_with_gateway(root, deltas, rounds)
    cold = results.get("cold")
    print(f"first run:  {f'cold {cold[0]:.1f} s, ' if cold else ''}warm worker (start included) "
          f"{warm[0]:.1f} s, lakesync pipeline run with lakesync up (its worker's start "
          f"included) {cli[0]:.1f} s")
    w, h = statistics.median(warm[1:]), statistics.median(cli[1:])
    c = statistics.median(cold[1:]) if cold else None
    print(f"increment of {deltas:,} deltas, median of {rounds}: "
          f"{'' if c is None else f'cold {c:.1f} s, '}warm {w:.1f} s"
          f"{'' if c is None else f' (warm/cold {w / c:.2f})'}, lakesync pipeline run with "
          f"lakesync up {h:.1f} s (cli/warm {h / w:.2f}; target <= 1.2)")


def freshness(root: Path, samples: int) -> None:
    from tests.gateway_process import ServerProcess

    data = root / "fresh"
    env = {"LAKESYNC_FLUSH_INTERVAL": "1", "LAKESYNC_PIPELINE_INTERVAL": "1"}
    settings = LakeSettings.from_env(data, env={})
    lags: list[float] = []
    with ServerProcess(data, env=env) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        admin = {"Authorization": f"Bearer {gw.token('ops', 'gw1', role='admin')}"}
        user = {"Authorization": f"Bearer {gw.token('alice', 'gw1')}"}
        http.post("/v1/admin/schema/gw1", json=SCHEMA, headers=admin).raise_for_status()
        for i in range(samples + 1):  # the first sample waits for the worker's start: not counted
            row = _increment(10_000_000 + i, 1, "alice")
            started = time.perf_counter()
            http.post("/v1/sync/gw1/push", headers=user | {"content-type": "application/json"},
                      content=encode_push("alice", row, None)).raise_for_status()
            while True:
                try:
                    got = run_query(
                        settings, f"select 1 from analytics.items where row_id = '{row[0].row_id}'"
                    ).rows
                except NotFoundError:
                    got = []
                if got:
                    break
                time.sleep(0.1)
            lag = time.perf_counter() - started
            print(f"  push → visible {i}: {lag:5.1f} s{' (warm-up)' if i == 0 else ''}", flush=True)
            if i:
                lags.append(lag)
    print(f"freshness under lakesync up (flush 1 s, pipeline interval 1 s): "
          f"p50 {statistics.median(lags):.1f} s, max {max(lags):.1f} s over {len(lags)} pushes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fresh", type=int, default=5)
    parser.add_argument("--no-cold", action="store_true",
                        help="skip the cold runs (a JVM start each: minutes on a loaded machine)")
    args = parser.parse_args()
    # The gateway may still be writing its log as it stops: cleanup is best effort.
    with tempfile.TemporaryDirectory(prefix="lakesync-warm-", ignore_cleanup_errors=True) as tmp:
        if args.rounds:
            cold_vs_warm(Path(tmp), args.deltas, args.rounds, not args.no_cold)
        if args.fresh:
            freshness(Path(tmp), args.fresh)


if __name__ == "__main__":
    main()
