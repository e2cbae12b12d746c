"""Compaction and maintenance of the lake's Iceberg tables, on Spark through dbt.

:func:`compact` runs the ``lakesync_maintain_table`` macro (``macros/maintenance.sql``: Iceberg's
``rewrite_data_files``, ``rewrite_manifests``, ``expire_snapshots`` and ``remove_orphan_files``
procedures) as a ``dbt run-operation`` for the landing table and every other table of the landing,
``analytics`` and ``lakesync_changes`` namespaces, one table at a time, on the process's Spark
session (the one :func:`lakesync.lakehouse.runner.run_pipeline` uses), and reports each table's data
files and bytes before and after. ``lakesync compact`` calls it; ``lakesync up`` asks its warm
pipeline worker for it every ``compaction_interval`` seconds (:mod:`lakesync.lakehouse.worker`).

Safe while the flusher appends to the landing table: every procedure commits optimistically
(Iceberg retries on a concurrent commit, and a rewrite never drops files it did not read), and
the landing snapshot recording the flushed position is never expired (see the macro), and a
late landing's mark outlives its snapshot
(:func:`lakesync.lakehouse.catalog.remember_late_landings`).

One table's failed maintenance is that table's: it is reported (``error`` of its
:class:`TableCompaction`) and every other table is still maintained.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from lakesync.errors import LakeSyncError
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import (
    LANDING_IDENTIFIER,
    open_catalog,
    remember_late_landings,
    require_lake,
)
from lakesync.lakehouse.object_store import object_store_failure
from lakesync.lakehouse.runner import DbtInvoker, PipelineError
from lakesync.lakehouse.settings import (
    ANALYTICS_NAMESPACE,
    CHANGES_NAMESPACE,
    LANDING_NAMESPACE,
    LakeSettings,
)
from lakesync.lakehouse.spark import spark_session

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

_log = logging.getLogger(__name__)

__all__ = [
    "CompactionError",
    "CompactionResult",
    "TableCompaction",
    "compact",
    "data_files",
    "maintained_tables",
]


class CompactionError(LakeSyncError):
    """Some tables' maintenance failed; the others were maintained."""

    code = "COMPACTION_ERROR"
    status = 500


class TableCompaction(msgspec.Struct, frozen=True):
    """One table's live data files (count and bytes) before and after its maintenance."""

    table: str
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    snapshots_before: int
    snapshots_after: int
    error: str | None = None
    """Why its maintenance failed (the figures after are then those before), else None."""


class CompactionResult(msgspec.Struct, frozen=True):
    """Every table maintained by one :func:`compact`, in order, and the wall time."""

    tables: list[TableCompaction]
    elapsed_s: float

    @property
    def failures(self) -> list[str]:
        """``table: error`` of each table whose maintenance failed."""
        return [f"{t.table}: {t.error}" for t in self.tables if t.error is not None]


CompactionProgress = Callable[[TableCompaction], None]
"""Called after each table with its before/after figures."""


def maintained_tables(catalog: Catalog) -> list[str]:
    """The landing table first, then every other table of the landing, ``analytics`` and
    ``lakesync_changes`` namespaces (the registry, the intermediate and the current-state models,
    the destinations' change sets: rebuilt by every run, their old snapshots expire here),
    sorted."""
    others = sorted(
        ".".join(ident)
        for namespace in (LANDING_NAMESPACE, ANALYTICS_NAMESPACE, CHANGES_NAMESPACE)
        if (namespace,) in catalog.list_namespaces()
        for ident in catalog.list_tables(namespace)
    )
    return [LANDING_IDENTIFIER, *(t for t in others if t != LANDING_IDENTIFIER)]


def data_files(table: Table) -> tuple[int, int]:
    """The data files (not delete files) the current snapshot reads: their count and bytes."""
    snapshot = table.current_snapshot()
    # pyiceberg's inspect.files() fails on a snapshot that lists no manifest (an empty change
    # set's, a table whose rows were all removed): such a table has no data file.
    if snapshot is None or not snapshot.manifests(table.io):
        return 0, 0
    files = table.inspect.files().select(["content", "file_size_in_bytes"]).to_pylist()
    sizes = [f["file_size_in_bytes"] for f in files if f["content"] == 0]
    return len(sizes), sum(sizes)


RACE_ATTEMPTS = 3
"""Runs of one table's maintenance when a procedure lost a race to a concurrent commit."""

_RACE_ERRORS = ("CommitFailedException", "ValidationException")


def _maintain(settings: LakeSettings, table: str, dbt: DbtInvoker) -> None:
    """Run the ``lakesync_maintain_table`` macro on ``table``, again when a procedure lost a race
    with a concurrent commit: e.g. the flusher's append drops the manifest that only lists the
    files a rewrite replaced, which ``rewrite_manifests`` then fails to find (nothing changed)."""
    args = ["run-operation", "lakesync_maintain_table", "--args", json.dumps({"table": table})]
    for attempt in range(1, RACE_ATTEMPTS + 1):
        try:
            dbt.invoke(settings, args)
        except PipelineError as exc:
            if attempt == RACE_ATTEMPTS or not any(e in exc.message for e in _RACE_ERRORS):
                raise
            _log.warning("maintenance of %s lost a race with a concurrent commit; again", table)
        else:
            return


def _maintain_one(
    catalog: Catalog, settings: LakeSettings, name: str, dbt: DbtInvoker
) -> TableCompaction:
    """Maintain one table and measure it; a failure is that table's, in its result."""
    files_before = bytes_before = snapshots_before = 0
    try:
        before = catalog.load_table(name)
        files_before, bytes_before = data_files(before)
        snapshots_before = len(before.snapshots())
        _maintain(settings, name, dbt)
        after = catalog.load_table(name)
        files_after, bytes_after = data_files(after)
    except Exception as exc:  # dbt, Spark, pyiceberg or pyarrow: this table's, reported
        _log.exception("maintenance of %s failed; the other tables are maintained", name)
        detail = exc.message if isinstance(exc, LakeSyncError) else f"{type(exc).__name__}: {exc}"
        store = object_store_failure(detail, settings.warehouse, settings.s3.endpoint)
        if store is not None:  # what to check, not the JVM's stack trace
            detail = store.message
        return TableCompaction(name, files_before, files_before, bytes_before, bytes_before,
                               snapshots_before, snapshots_before, detail)
    return TableCompaction(
        table=name,
        files_before=files_before,
        files_after=files_after,
        bytes_before=bytes_before,
        bytes_after=bytes_after,
        snapshots_before=snapshots_before,
        snapshots_after=len(after.snapshots()),
    )


def compact(
    settings: LakeSettings,
    on_progress: CompactionProgress | None = None,
    dbt: DbtInvoker | None = None,
    on_plan: Callable[[list[str]], None] | None = None,
) -> CompactionResult:
    """Maintain every table of the lake once (see the module docstring); returns the figures.

    Raises :class:`~lakesync.errors.NotFoundError` when the data dir holds no lake. A table
    whose maintenance fails (after :data:`RACE_ATTEMPTS` runs when it lost a race with a
    concurrent commit) is reported in its :class:`TableCompaction` (``error``; see
    :attr:`CompactionResult.failures`) and the next tables are maintained all the same.
    ``dbt`` keeps the parsed project (default: one :class:`DbtInvoker` for this compaction);
    ``on_plan`` gets the tables it will maintain, in order, before the first (a progress bar's
    total).
    """
    started = time.monotonic()
    require_lake(settings)
    bootstrap(settings)
    spark_session(settings)  # dbt-spark's getOrCreate() then reuses it, with its log settings
    catalog = open_catalog(settings)
    # Expiry may drop the snapshot of a late landing the pipeline has not merged yet: keep its
    # mark on the table, so the next run still rebuilds the models.
    remember_late_landings(catalog)
    dbt = dbt or DbtInvoker()
    done: list[TableCompaction] = []
    tables = maintained_tables(catalog)
    if on_plan is not None:
        on_plan(tables)
    for name in tables:
        table = _maintain_one(catalog, settings, name, dbt)
        done.append(table)
        if on_progress is not None:
            on_progress(table)
    return CompactionResult(done, time.monotonic() - started)
