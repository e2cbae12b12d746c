"""Compaction: the lake's data files and bytes before and after ``lakesync compact``.

N deltas (default 1,000,000) of one table are pushed into the gateway's SQLite hot log and
landed by the :class:`~lakesync.lakehouse.landing.LandingFlusher` in B batches (default 1,000: one
Iceberg commit, so at least one small data file, each), as a gateway flushing every few seconds
would. Then :func:`lakesync.lakehouse.compaction.compact` runs the maintenance macros on Spark
through dbt
(``macros/maintenance.sql``) with the default retention. Printed per table: data files, bytes
and snapshots before → after, the mean flush time per tenth of the batches, and the wall times
of landing and compaction.

Measured at the default size (1,000,000 deltas in 1,000 batches; 2 cores shared with other
work, load average 8-16, so this process got 15-25 % of a core): the landing table went from
1,000 data files (53.5 MiB) to 1 (40.7 MiB); landing took 718 s and 1,212 s of wall time in two
runs, compaction 120 s and 236 s (the whole run: 198 and 208 s of CPU). Before the flusher
committed through :class:`lakesync.lakehouse._transaction.StagedTransaction`, landing alone passed
15 minutes at batch 840: pyiceberg deep-copied the whole table metadata about twenty times per
commit, so a commit's CPU time grew 0.82 ms per snapshot the table held (26 ms at 10 snapshots,
843 ms at 1,010); now 0.16 ms (14 → 177 ms). That remaining growth is Iceberg's own (each commit
rewrites the metadata file listing every snapshot) and lasts until ``lakesync compact`` expires
snapshots older than ``lake.snapshot_retention`` (``bench/landing_commit_bench.py``).

Run from the repository root:
``.venv/bin/python -m bench.compaction_bench [--deltas N] [--batches B] [--data-dir D]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from lakesync.cli.compact import progress_line
from lakesync.delta import RowDelta
from lakesync.hlc import HLC, encode
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.compaction import compact
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.settings import LakeSettings

ROWS = 10_000
"""Distinct row ids the deltas update (so later deltas are updates, as in a live table)."""


def land(settings: LakeSettings, deltas: int, batches: int) -> None:
    """Push ``deltas`` deltas into a hot log and land them in ``batches`` flushes, printing the
    mean flush time of every tenth of the batches (a commit's cost must not grow with history)."""
    log = SqliteHotLog(settings.data_dir / "hotlog.sqlite3", HLC())
    flusher = LandingFlusher(open_catalog(settings), log)
    per_batch = max(1, deltas // batches)
    start_ms = int(time.time() * 1000) - deltas
    tenth = max(1, batches // 10)
    flushing = 0.0
    for b in range(batches):
        first = b * per_batch
        batch = [
            RowDelta.create(
                "UPDATE" if i >= ROWS else "INSERT",
                "todos",
                f"row-{i % ROWS}",
                f"client-{i % 7}",
                {"title": f"title {i}", "done": i % 3 == 0, "n": i},
                encode(start_ms + i, 0),
            )
            for i in range(first, min(deltas, first + per_batch))
        ]
        for chunk in range(0, len(batch), 2_000):  # pushes of the gateway's size
            log.append("gw1", batch[chunk : chunk + 2_000])
        started = time.monotonic()
        flusher.flush()
        flushing += time.monotonic() - started
        if (b + 1) % tenth == 0:
            mean_ms = flushing / tenth * 1000
            print(f"  batches {b + 2 - tenth:,}-{b + 1:,}: {mean_ms:.0f} ms per flush", flush=True)
            flushing = 0.0
    log.close()


def main() -> None:
    """Land, compact, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=1_000)
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temporary dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakesync-compaction-") as tmp:
        settings = LakeSettings.from_env(args.data_dir or Path(tmp), env={})
        bootstrap(settings)
        started = time.monotonic()
        land(settings, args.deltas, args.batches)
        landed_s = time.monotonic() - started
        print(f"landed {args.deltas:,} deltas in {args.batches:,} batches in {landed_s:.1f} s")
        result = compact(settings, lambda t: print(progress_line(t), flush=True))
        landing = result.tables[0]
        print(f"compaction: {result.elapsed_s:.1f} s for {len(result.tables)} tables")
        print(
            f"landing: {landing.files_before:,} → {landing.files_after:,} data files, "
            f"{landing.bytes_before:,} → {landing.bytes_after:,} bytes"
        )


if __name__ == "__main__":
    main()
