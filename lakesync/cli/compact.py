"""``lakesync compact``: Iceberg maintenance of every lake table, on Spark through dbt.

Listed in ``lakesync/cli/main.py``'s ``LAZY_COMMANDS`` (loaded when the command runs). What runs
and the retention settings: :mod:`lakesync.lakehouse.compaction` and ``macros/maintenance.sql``.
Each table's figures print as it is done; a terminal also shows a progress bar over the tables
(done/total, the table being maintained). When ``lakesync up`` serves the data dir, its warm
pipeline worker compacts (:mod:`lakesync.cli.handover`).
"""

from __future__ import annotations

import contextlib

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from lakesync.cli.handover import InProcessOption, lake_job
from lakesync.cli.jars import ProgressLine, fetch_spark_jars
from lakesync.cli.lake import DataDirOption
from lakesync.cli.materialise import ConfigOption
from lakesync.cli.output import plain, printable
from lakesync.config import load_config
from lakesync.lakehouse.catalog import require_lake
from lakesync.lakehouse.compaction import (
    CompactionError,
    CompactionResult,
    TableCompaction,
    compact,
)
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.worker import Compacted, Queued, TablesPlanned, WorkerEvent

__all__ = ["CompactView", "compact_command", "progress_line"]


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


class CompactView(ProgressLine):
    """What ``lakesync compact`` shows while it runs: each table's figures on ``out`` as it is
    done and, in a terminal, a progress bar over the tables (done/total, the one being
    maintained, elapsed) on ``console``; elsewhere only the figures."""

    def __init__(self, stack: contextlib.ExitStack, out: Console,
                 console: Console | None = None) -> None:
        self._out = out
        console = console or Console(stderr=True)
        self._console = console
        self._tables: list[str] = []
        self._done = 0
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if console.is_terminal:
            self._progress = stack.enter_context(Progress(
                SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True,
            ))
            self._task = self._progress.add_task("compacting (Spark starting)", total=None)

    def planned(self, tables: list[str]) -> None:
        """The tables to maintain, in order."""
        self._tables = list(tables)
        self._draw()

    def compacted(self, table: TableCompaction) -> None:
        """One table done: print its figures."""
        self._done += 1
        self._out.print(plain(progress_line(table)))
        self._draw()

    def waiting(self, running: str) -> None:
        """The gateway's worker runs ``running`` first."""
        self._describe(printable(f"waiting for the gateway's {running}"))

    def event(self, event: WorkerEvent) -> None:
        """An event of the compaction on the gateway's worker."""
        match event:
            case TablesPlanned(tables=tables):
                self.planned(tables)
            case Compacted(result=result):
                self.compacted(result)
            case Queued(running=running):
                self.waiting(running)

    def _draw(self) -> None:
        if self._progress is None or self._task is None:
            return
        current = self._tables[self._done] if self._done < len(self._tables) else None
        self._progress.update(
            self._task, total=len(self._tables) or None, completed=self._done,
            description=printable(f"compacting {current} …") if current else "compacting",
        )
        self._progress.refresh()


def compact_command(
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
    in_process: InProcessOption = False,
) -> None:
    """Compact small data files, rewrite manifests, expire snapshots older than
    lake.snapshot_retention and remove orphan files, for the landing table and every model.
    A table whose maintenance fails is listed and the others are maintained; the command then
    exits 1. When lakesync up serves the data dir, its warm pipeline worker compacts."""
    cfg = load_config(config)
    settings = LakeSettings.from_config(cfg, data_dir)
    job = lake_job("compact", settings.data_dir, cfg, in_process)
    out = Console(highlight=False)
    with contextlib.ExitStack() as stack:
        view = CompactView(stack, out)

        def here() -> CompactionResult:
            require_lake(settings)  # before a download: a mistyped --data-dir is an error
            fetch_spark_jars(settings.jars_dir, view.preparing)
            return compact(settings, view.compacted, on_plan=view.planned)

        result = job.run(
            view.event,
            here=here,
            handed=lambda reply: CompactionResult(reply.compacted, reply.elapsed_s),
        )
    failures = result.failures
    done = len(result.tables) - len(failures)
    out.print(f"{done} tables maintained in {result.elapsed_s:.1f} s")
    if failures:
        raise CompactionError(
            f"{len(failures)} of {len(result.tables)} tables failed their maintenance (the rest "
            f"were maintained): {'; '.join(failures)}"
        )
