"""``lakesync compact``: Iceberg maintenance of every lake table, on Spark through dbt.

Listed in ``lakesync/cli/main.py``'s ``LAZY_COMMANDS`` (loaded when the command runs). What runs
and the retention settings: :mod:`lakesync.lakehouse.compaction` and ``macros/maintenance.sql``.
"""

from __future__ import annotations

from rich.console import Console

from lakesync.cli.lake import DataDirOption
from lakesync.cli.materialise import ConfigOption
from lakesync.config import load_config
from lakesync.lakehouse.compaction import CompactionError, TableCompaction, compact
from lakesync.lakehouse.settings import LakeSettings

__all__ = ["compact_command"]


def _size(n: int) -> str:
    size, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def progress_line(t: TableCompaction) -> str:
    """One table's figures: ``lakesync.landing: 1000 → 4 files, 5.1 MiB → 3.2 MiB, …``, or
    ``TABLE: failed: WHY``."""
    if t.error is not None:
        return f"{t.table}: failed: {t.error}"
    return (
        f"{t.table}: {t.files_before} → {t.files_after} data files, "
        f"{_size(t.bytes_before)} → {_size(t.bytes_after)}, "
        f"{t.snapshots_before} → {t.snapshots_after} snapshots"
    )


def compact_command(data_dir: DataDirOption = None, config: ConfigOption = None) -> None:
    """Compact small data files, rewrite manifests, expire snapshots older than
    lake.snapshot_retention and remove orphan files, for the landing table and every model.
    A table whose maintenance fails is listed and the others are maintained; the command then
    exits 1."""
    settings = LakeSettings.from_config(load_config(config), data_dir)
    out = Console(highlight=False)
    with Console(stderr=True).status("compacting (Spark starting)") as status:

        def on_progress(table: TableCompaction) -> None:
            out.print(progress_line(table))
            status.update(f"compacting (done: {table.table})")

        result = compact(settings, on_progress)
    failures = result.failures
    done = len(result.tables) - len(failures)
    out.print(f"{done} tables maintained in {result.elapsed_s:.1f} s")
    if failures:
        raise CompactionError(
            f"{len(failures)} of {len(result.tables)} tables failed their maintenance (the rest "
            f"were maintained): {'; '.join(failures)}"
        )
