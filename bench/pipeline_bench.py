"""Benchmark the lake: land and merge N deltas (default 1,000,000), then increments of 10,000.

Usage: ``.venv/bin/python bench/pipeline_bench.py [--deltas N] [--incremental M] [--rounds K]
[--data-dir D]``

Prints wall times, deltas/s, each incremental run's time per dbt node (and the rest: dbt's start-up
and the runner's bookkeeping) and the Spark driver JVM's peak resident memory (VmHWM; with
``local[2]`` the executors live in that JVM). ``--rounds`` lands and merges that many increments in
a row (the cost of a scheduled run should not grow with the number of runs before it). The dbt data
tests are skipped (``dbt run``), as a scheduled pipeline may; ``--tests`` includes them.
"""

from __future__ import annotations

import argparse
import bisect
import random
import tempfile
import time
from pathlib import Path

from lakesync.delta import RowDelta
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.runner import PipelineResult, run_pipeline
from lakesync.lakehouse.settings import LakeSettings
from lakesync.schema import parse_schema

SCHEMA = parse_schema({"table": "items", "columns": [
    {"name": "title", "type": "string"},
    {"name": "qty", "type": "number"},
    {"name": "done", "type": "boolean"},
]})
CLIENTS = [f"client-{i}" for i in range(16)]
BASE_HLC = 1_700_000_000_000 << 16


class ListHotLog:
    """An in-memory hot log: entries in increasing ingest position (the flusher's source)."""

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.entries: list[tuple[int, str, RowDelta]] = []

    def extend(self, deltas: list[RowDelta]) -> None:
        start = self.positions[-1] + 1 if self.positions else 1
        for i, d in enumerate(deltas):
            self.positions.append(start + i)
            self.entries.append((start + i, "bench", d))

    def read_log(
        self, after: int, limit: int, gateway_id: str | None = None
    ) -> list[tuple[int, str, RowDelta]]:
        i = bisect.bisect_right(self.positions, after)
        mine = (
            self.entries[i:]
            if gateway_id is None
            else [e for e in self.entries[i:] if e[1] == gateway_id]
        )
        return mine[:limit]


def make_deltas(
    n: int, rows: int, rng: random.Random, hlc_start: int, inserts: bool = True
) -> list[RowDelta]:
    """``n`` deltas over ``rows`` rows: inserts first (if ``inserts``), then updates, deletes."""
    out: list[RowDelta] = []
    hlc = hlc_start
    for i in range(n):
        hlc += rng.randint(1, 3)
        client = rng.choice(CLIENTS)
        if inserts and i < rows:
            cols = {"title": f"item {i}", "qty": i % 100, "done": False}
            out.append(RowDelta.create("INSERT", "items", f"r{i}", client, cols, hlc))
            continue
        row = f"r{rng.randrange(rows)}"
        if rng.random() < 0.02:
            out.append(RowDelta.create("DELETE", "items", row, client, {}, hlc))
            continue
        cols = {"qty": rng.randint(0, 1000)} if rng.random() < 0.7 else {"done": True, "title": "x"}
        # Some deltas arrive late with an older clock: they must lose per cell.
        late = hlc - rng.randint(1000, 100_000) if rng.random() < 0.05 else hlc
        out.append(RowDelta.create("UPDATE", "items", row, client, cols, late))
    return out


def jvm_peak_rss_mb(spark: object) -> float:
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[attr-defined]
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class NodeTimer:
    """An ``on_progress`` callback recording each dbt node's wall time (nodes may overlap)."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.seconds: dict[str, float] = {}

    def __call__(self, node: str, status: str) -> None:
        now = time.perf_counter()
        if status == "started":
            self.started[node] = now
        else:
            self.seconds[node] = now - self.started[node]

    def span(self) -> float:
        """Wall time from the first node's start to the last node's end."""
        ends = [self.started[n] + s for n, s in self.seconds.items()]
        return max(ends) - min(self.started.values()) if ends else 0.0


def timed_run(settings: LakeSettings, tests: bool) -> tuple[PipelineResult, float, NodeTimer]:
    """One pipeline run: its result, its wall time and its per-node times."""
    timer = NodeTimer()
    t = time.perf_counter()
    result = run_pipeline(settings=settings, schemas=[SCHEMA], tests=tests, on_progress=timer)
    return result, time.perf_counter() - t, timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", type=int, default=1_000_000)
    parser.add_argument("--incremental", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1, help="incremental runs (default 1)")
    parser.add_argument("--rows", type=int, default=0, help="distinct rows (default deltas/5)")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--tests", action="store_true", help="also run the dbt data tests")
    args = parser.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="lakesync-bench-"))
    settings = bootstrap(LakeSettings.from_env(data_dir))
    rng = random.Random(42)
    rows = args.rows or max(1, args.deltas // 5)

    t = time.perf_counter()
    deltas = make_deltas(args.deltas, rows, rng, BASE_HLC)
    gen_s = time.perf_counter() - t
    log = ListHotLog()
    log.extend(deltas)
    flusher = LandingFlusher(open_catalog(settings), log, batch_size=250_000)
    t = time.perf_counter()
    landed = flusher.flush()
    land_s = time.perf_counter() - t

    first, merge_s, _ = timed_run(settings, args.tests)
    increments = []
    for _ in range(args.rounds):
        log.extend(make_deltas(args.incremental, rows, rng, BASE_HLC + len(log.entries) * 4, False))
        t = time.perf_counter()
        flusher.flush()
        increments.append((time.perf_counter() - t, *timed_run(settings, args.tests)))

    from lakesync.lakehouse.spark import spark_session

    spark = spark_session(settings)
    live = spark.sql("select count(*) as n from analytics.items").first()
    print(f"data dir               {data_dir}")
    print(f"generate {len(deltas):>9,} deltas  {gen_s:8.1f} s (RowDelta.create incl. deltaId)")
    print(f"land     {landed.rows:>9,} deltas  {land_s:8.1f} s  "
          f"{landed.rows / land_s:>10,.0f} deltas/s  ({landed.commits} commits)")
    print(f"merge    {first.rows_merged:>9,} deltas  {merge_s:8.1f} s  "
          f"{first.rows_merged / merge_s:>10,.0f} deltas/s  (incl. Spark start, dbt parse)")
    print(f"land+merge total          {land_s + merge_s:8.1f} s  "
          f"{landed.rows / (land_s + merge_s):>10,.0f} deltas/s")
    for i, (inc_land_s, result, inc_s, timer) in enumerate(increments, 1):
        # Ephemeral staging models report a start and an end too, but run nothing.
        nodes = ", ".join(f"{n} {s:.1f}" for n, s in timer.seconds.items() if s >= 0.05)
        print(f"increment {result.rows_merged:>8,} deltas  {inc_land_s + inc_s:8.1f} s  "
              f"(land {inc_land_s:.2f} s, merge {inc_s:.1f} s) round {i}")
        span = timer.span()
        print(f"    nodes {span:.1f} s: {nodes}; outside nodes {inc_s - span:.1f} s")
    print(f"live rows in analytics.items: {live['n'] if live else 0:,}")
    print(f"JVM peak RSS           {jvm_peak_rss_mb(spark):8.0f} MB")

if __name__ == "__main__":
    main()
