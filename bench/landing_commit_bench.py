"""Landing commits: CPU time of one commit as the landing table's snapshots accumulate.

Appends 10-row batches to a fresh landing table and, at 10, 260, 510 and 1,010 snapshots (or
``--at``), times 5 commits through pyiceberg's own ``Transaction`` and 5 through the flusher's
:class:`lakesync.lakehouse._transaction.StagedTransaction`, in process CPU time (steadier than wall
time
on a shared machine). Measured on a 2-core machine at load average 10-12: 26 → 843 ms per commit
from 10 to 1,010 snapshots with ``Transaction``, 14 → 177 ms with ``StagedTransaction``.

Run from the repository root: ``.venv/bin/python -m bench.landing_commit_bench [--at N ...]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from pyiceberg.table import Table, Transaction

from lakesync.delta import RowDelta
from lakesync.lakehouse._transaction import StagedTransaction
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import POSITION_PROPERTY, ensure_landing_table, open_catalog
from lakesync.lakehouse.landing import landing_rows
from lakesync.lakehouse.settings import LakeSettings

ROWS = 10
TIMED = 5


def commit(table: Table, kind: type[Transaction], batch: int) -> Table:
    """Append one batch (with its position, as the flusher does) through ``kind``."""
    entries = [
        (batch * ROWS + i + 1, "gw1",
         RowDelta.create("INSERT", "todos", f"r{i}", "c", {"n": batch}, batch * ROWS + i + 1))
        for i in range(ROWS)
    ]
    tx = kind(table)
    tx.append(landing_rows(entries, datetime.now(UTC)),
              snapshot_properties={POSITION_PROPERTY: str(entries[-1][0])})
    return tx.commit_transaction()


def main() -> None:
    """Grow the table, time commits at each size, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--at", type=int, nargs="+", default=[10, 260, 510, 1010])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakesync-commits-") as tmp:
        settings = LakeSettings.from_env(Path(tmp), env={})
        bootstrap(settings)
        table = ensure_landing_table(open_catalog(settings))
        batch = 0
        for size in args.at:
            while len(table.snapshots()) < size:
                table = commit(table, StagedTransaction, batch)
                batch += 1
            figures = []
            for kind in (Transaction, StagedTransaction):
                started = time.process_time()
                for _ in range(TIMED):
                    table = commit(table, kind, batch)
                    batch += 1
                per_commit_ms = (time.process_time() - started) / TIMED * 1000
                figures.append(f"{kind.__name__} {per_commit_ms:.0f} ms")
            print(f"{size:,} snapshots: CPU per commit: {', '.join(figures)}", flush=True)


if __name__ == "__main__":
    main()
