"""Ship the lake's change sets to the declared destinations (``lakesync materialise``).

Per destination and table, the change set is a dbt model
(``lakesync_changes.changes__<destination>__<table>``, :mod:`lakesync.lakehouse.change_sets`): the
live rows of ``analytics.<table>`` and the rows gone from ``int_rows_merged`` past the destination's
watermark, two scans and no join (:func:`lakesync.destinations.statements.change_set_query`).
``lakesync pipeline run`` builds them in its own ``dbt build`` from the watermarks read just before;
here, the change sets not built from their destination's current watermark are first rebuilt in one
dbt invocation. Then per table: read the watermark, check the change set was built from it, have
Spark's executors write the change set in parallel over JDBC into the destination's staging table,
then one set-based upsert and delete apply it and the watermark moves, in one destination
transaction. For BigQuery the executors write the change set as newline-delimited JSON files,
bulk-loaded into its staging table by one load job, then one ``MERGE`` and a delete apply it and the
watermark moves (no transaction there; a re-run converges). Other destinations (the lake) get the
change set through the driver. A run killed at any point leaves the watermark where the last commit
put it; the next run ships the same rows again, which converges (each row carries its whole state).
One failing destination or table is reported and never stops the others. For a PostgreSQL
destination the change-set model maps U+0000 to U+FFFD, which its ``text`` and ``jsonb`` refuse
(:mod:`lakesync.destinations.statements`).

A destination with ``routes`` ships each routed table into the destination its route names; one with
``secondaries`` ships to its primary first, then to each secondary from the secondary's own
watermark (kept in the secondary, like any destination's), so a secondary that missed change sets
(down, table dropped) is caught up by the next run; a secondary's failure is logged, counted in
:class:`~lakesync.destinations.metrics.DestinationMetrics` and in the result's
``secondary_failures``, and fails nothing. Destinations named by another's routes or secondaries are
shipped only through it.

Lifecycle tiering: after a table shipped, a destination with a ``hot_window`` loses the rows whose
last change (their greatest cell or tombstone clock in the lake,
:mod:`lakesync.lakehouse.lifecycle`) is older than the window, however recently they were shipped;
the lake's ``analytics.<table>`` keeps every row, so ``lakesync query`` over it still answers for
hot and cold rows alike. A row that changes again is shipped again (its whole state) and is hot once
more. :func:`tier` runs the tiering alone (``lakesync materialise --lifecycle-only``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from lakesync.config import Config
from lakesync.destination_specs import DestinationSpec, shipped_on_their_own
from lakesync.destinations.base import Destination, DestinationError, TieringMark
from lakesync.destinations.factory import open_destination
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.destinations.routing import FanOutDestination, open_declared
from lakesync.destinations.statements import DELETED
from lakesync.errors import LakeSyncError
from lakesync.lakehouse.catalog import lake_catalog, open_catalog, require_lake
from lakesync.lakehouse.change_sets import (
    NONE,
    build_vars,
    built_change_sets,
    mark_drained,
    planned_change_sets,
    read_watermarks,
    schemas_by_gateway,
    stale_change_sets,
)
from lakesync.lakehouse.lifecycle import aged_rows, cutoff_hlc
from lakesync.lakehouse.models import (
    ChangeSetModel,
    lake_tables,
    prepare_project,
    table_columns,
    write_change_set_models,
    write_models,
)
from lakesync.lakehouse.runner import PipelineError, dbt_invoke, registered_table_schemas
from lakesync.lakehouse.settings import CHANGES_NAMESPACE, LakeSettings
from lakesync.lakehouse.spark import spark_session
from lakesync.schema import DELETED_COLUMN, ColumnSpec, TableSchema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ShipResult", "materialise", "tier"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShipResult:
    """What shipping one table to one destination did."""

    destination: str
    table: str
    rows: int = 0
    """Changed rows applied (upserted or deleted)."""
    position: int | None = None
    """The watermark after the run (None: nothing shipped yet)."""
    error: str | None = None
    elapsed_s: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)
    """Seconds per step: ``prepare`` (table, watermark, change set), ``ship`` (the destination's
    :meth:`~lakesync.destinations.base.Destination.apply_change_set`: the change set read on
    Spark, loaded, applied with the watermark)."""
    secondary_failures: int = 0
    """Fan-out secondaries this table failed to ship to (best effort: the next run retries them
    from their own watermark)."""
    evicted: int = 0
    """Rows lifecycle tiering took out of the destination (its ``hot_window``)."""


def materialise(
    settings: LakeSettings,
    config: Config,
    *,
    spark: SparkSession | None = None,
    on_result: Callable[[ShipResult], None] | None = None,
    metrics: DestinationMetrics | None = None,
    on_progress: Callable[[str, str], None] | None = None,
    not_built: Mapping[str, str] | None = None,
) -> list[ShipResult]:
    """Ship every declared destination's tables, then tier those with a ``hot_window``; returns
    one result per (destination, table). ``on_progress`` gets the dbt nodes of a change-set
    rebuild (as :func:`lakesync.lakehouse.runner.dbt_invoke` reports them). ``not_built``: the
    tables the pipeline run just before failed to build, with why
    (:attr:`lakesync.lakehouse.runner.PipelineResult.failed`): their current state is stale, so
    they are reported failed and not shipped; the others ship."""
    results, report = _collector(on_result)
    now = datetime.now(UTC)
    skipped = dict(not_built or {})
    unbuilt = _build_stale_change_sets(settings, config, on_progress, skipped)
    for spec, dest, schema, columns in _declared_tables(settings, config, metrics, report):
        if schema.table in skipped:
            report(ShipResult(spec.name, schema.table,
                              error=f"not built by the pipeline run: {skipped[schema.table]}"))
            continue
        session = spark or spark_session(settings)
        fan_out = dest if isinstance(dest, FanOutDestination) else None
        target = (dest if fan_out is None else fan_out.primary).for_table(schema.table)
        result = _ship_table(session, settings, spec, target, schema, columns, unbuilt)
        if fan_out is not None:
            failed = _ship_secondaries(session, settings, fan_out, schema, columns, metrics,
                                       unbuilt)
            result = replace(result, secondary_failures=failed)
        if result.error is None:
            result = _evict(settings, result, target, schema, columns, now)
        report(result)
    return results


def _build_stale_change_sets(
    settings: LakeSettings,
    config: Config,
    on_progress: Callable[[str, str], None] | None,
    not_built: Mapping[str, str],
) -> str | None:
    """Rebuild, in one dbt invocation, the change sets not built from their destination's
    current watermark (none after a ``lakesync pipeline run`` that nothing shipped since),
    except those of ``not_built`` tables (their current state is stale).
    Returns dbt's error if that build failed (the shipments it concerns report it)."""
    require_lake(settings)
    tables = table_columns(registered_table_schemas(settings, config))
    models = planned_change_sets(settings, config, tables)
    marks = read_watermarks(settings, config.destinations, models)
    stale = [m for m in stale_change_sets(settings, marks, models) if m.table not in not_built]
    if not stale:
        return None
    # The same files `lakesync pipeline run` writes (unchanged files are not rewritten).
    generated = prepare_project(settings.dbt_project_dir, settings.dbt_run_project_dir)
    write_models(generated, tables)
    write_change_set_models(generated, models)
    spark_session(settings)  # dbt-spark's getOrCreate() then reuses it
    args = ["build", "--exclude-resource-type", "unit_test", *build_vars(marks, models),
            "--select", *(f"{m.name}+" for m in stale)]
    try:
        dbt_invoke(settings, args, on_progress)
    except PipelineError as exc:
        _log.warning("rebuilding change sets failed: %s", exc.message)
        return exc.message
    return None


def _ship_secondaries(
    spark: SparkSession,
    settings: LakeSettings,
    fan_out: FanOutDestination,
    schema: TableSchema,
    columns: Sequence[ColumnSpec],
    metrics: DestinationMetrics | None,
    unbuilt: str | None,
) -> int:
    """Ship ``schema``'s table to each fan-out secondary from that secondary's own watermark
    (so one that missed runs is caught up by the next), best effort: a failure is logged and
    counted, never raised. Returns how many secondaries failed."""
    failed = 0
    for name, secondary in fan_out.secondaries.items():
        result = _ship_table(spark, settings, secondary.spec, secondary, schema, columns,
                             unbuilt)
        if result.error is None:
            continue
        failed += 1
        if metrics is not None:
            metrics.secondary_failed(fan_out.spec.name, name)
        _log.warning("secondary destination %s: shipping %s failed (%s); the primary has it, "
                     "the next run catches it up", name, schema.table, result.error)
    return failed


def tier(
    settings: LakeSettings,
    config: Config,
    *,
    now: datetime | None = None,
    on_result: Callable[[ShipResult], None] | None = None,
) -> list[ShipResult]:
    """Lifecycle tiering alone (no Spark): in every destination with a ``hot_window``, remove
    the rows whose last change in the lake is before ``now`` minus the window; the lake's
    ``analytics.<table>`` (the cold tier) keeps them. One result per (destination, table),
    with ``evicted`` set. :func:`materialise` does the same after shipping each table."""
    results, report = _collector(on_result)
    moment = now or datetime.now(UTC)
    tiered = {n for n, s in config.destinations.items() if s.hot_window is not None}
    for spec, dest, schema, columns in _declared_tables(
        settings, config, None, report, lambda s: bool(tiered & {s.name, *s.routes.values()})
    ):
        target = dest.for_table(schema.table)
        if target.spec.hot_window is None:
            continue
        result = ShipResult(spec.name, schema.table)
        try:
            target.ensure_table(target.layout(schema.table, columns, schema.external_id_column))
        except LakeSyncError as exc:
            report(replace(result, error=exc.message))
            continue
        report(_evict(settings, result, target, schema, columns, moment))
    return results


def _collector(
    on_result: Callable[[ShipResult], None] | None,
) -> tuple[list[ShipResult], Callable[[ShipResult], None]]:
    """A result list and the function that adds to it (and passes each result on)."""
    results: list[ShipResult] = []

    def report(result: ShipResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    return results, report


def _declared_tables(
    settings: LakeSettings,
    config: Config,
    metrics: DestinationMetrics | None,
    report: Callable[[ShipResult], None],
    wanted: Callable[[DestinationSpec], bool] = lambda _: True,
) -> Iterator[tuple[DestinationSpec, Destination, TableSchema, list[ColumnSpec]]]:
    """Each declared destination (with its routes and secondaries) and each table it ships, with
    the table's lake columns; a destination that cannot be opened, and a table the lake cannot
    build (:func:`~lakesync.lakehouse.models.lake_tables`: a reserved name, columns typed
    differently by two gateways), are reported and skipped."""
    require_lake(settings)
    by_gateway = schemas_by_gateway(settings, config)
    # The lake keeps one typed table per name (the union of every gateway's columns).
    columns, unbuildable = lake_tables(s for schemas in by_gateway.values() for s in schemas)

    def open_one(spec: DestinationSpec) -> Destination:
        return open_destination(spec, catalog=lake_catalog(settings))

    for spec in shipped_on_their_own(config.destinations):
        if not wanted(spec):
            continue
        schemas = [s for s in by_gateway.get(spec.gateway, []) if spec.ships(s.table)]
        try:
            dest = open_declared(spec, config.destinations, open_one, metrics)
        except LakeSyncError as exc:
            report(ShipResult(spec.name, "*", error=exc.message))
            continue
        with dest:
            for schema in schemas:
                if schema.table in unbuildable:
                    report(ShipResult(spec.name, schema.table, error=unbuildable[schema.table]))
                    continue
                yield spec, dest, schema, list(columns[schema.table])


def _evict(
    settings: LakeSettings,
    result: ShipResult,
    target: Destination,
    schema: TableSchema,
    columns: Sequence[ColumnSpec],
    now: datetime,
) -> ShipResult:
    """``result`` with the rows ``target``'s hot window retires evicted (none without one): the
    rows whose last change in the lake is older than the window."""
    window = target.spec.hot_window_seconds
    if window is None:
        return result
    layout = target.layout(schema.table, columns, schema.external_id_column)
    before = now - timedelta(seconds=window)
    try:
        shipped = result.position if result.position is not None else target.watermark(
            schema.table)
        if shipped is None:  # nothing shipped: nothing to evict
            return result
        mark = target.tiering_mark(schema.table)
    except LakeSyncError as exc:
        return replace(result, error=f"lifecycle tiering: {exc.message}")
    if mark is not None and mark.position > shipped:
        mark = None  # the destination went back (reset or restored): check every row
    try:
        aged = aged_rows(open_catalog(settings), target.spec.gateway, schema.table, before, mark)
    except Exception as exc:  # pyiceberg and pyarrow errors (a missing or unreadable file)
        _log.exception("lifecycle tiering of %s: reading the lake's row clocks failed",
                       schema.table)
        return replace(result, error=(
            f"lifecycle tiering: cannot read the lake's row clocks ({type(exc).__name__}: "
            f"{exc}); run `lakesync pipeline run` (or `--full-refresh`) to rebuild them"
        ))
    try:
        evicted = target.evict(layout, aged, TieringMark(cutoff_hlc(before), shipped))
    except LakeSyncError as exc:
        return replace(result, error=f"lifecycle tiering: {exc.message}")
    return replace(result, evicted=evicted)


def _ship_table(
    spark: SparkSession,
    settings: LakeSettings,
    spec: DestinationSpec,
    dest: Destination,
    schema: TableSchema,
    columns: Sequence[ColumnSpec],
    unbuilt: str | None,
) -> ShipResult:
    started = time.monotonic()
    steps: dict[str, float] = {}
    mark = started

    def step(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        steps[name] = now - mark
        mark = now

    table = schema.table
    try:
        layout = dest.layout(table, columns, schema.external_id_column)
        dest.ensure_table(layout)
        since = dest.watermark(table)
        model = ChangeSetModel(dest.spec.name, spec.gateway, table, ())
        frame = _change_set(spark, settings, model, since, unbuilt)
        step("prepare")
        if frame is None:  # shipped up to this watermark, and the lake has not changed since
            count, position = 0, since
        else:
            count, position = dest.apply_change_set(layout, frame)
        step("ship")
        if count == 0:
            position = since
        if frame is not None:
            mark_drained(settings, model, NONE if position is None else position)
    except LakeSyncError as exc:
        return ShipResult(spec.name, table, error=exc.message,
                          elapsed_s=time.monotonic() - started)
    except Exception as exc:  # Spark's errors (Py4J, analysis) name no LakeSync type
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            return ShipResult(spec.name, table, error=f"Spark: {detail}",
                              elapsed_s=time.monotonic() - started)
        # Anything else is this table's failure too: logged with its trace, reported, and the
        # other tables still ship.
        _log.exception("shipping %s to %s failed", table, spec.name)
        return ShipResult(spec.name, table, error=f"{type(exc).__name__}: {detail}",
                          elapsed_s=time.monotonic() - started)
    return ShipResult(spec.name, table, count, position,
                      elapsed_s=time.monotonic() - started, steps=steps)


def _change_set(
    spark: SparkSession,
    settings: LakeSettings,
    model: ChangeSetModel,
    since: int | None,
    unbuilt: str | None,
) -> DataFrame | None:
    """The change-set table of ``model``, which must serve the destination's watermark
    ``since``, with the staging column names; None when there is nothing past ``since``."""
    mark = NONE if since is None else since
    built = built_change_sets(settings, [model])[model.name]
    serves = built.serves(mark)
    if serves == "empty":
        return None
    if serves == "rebuild":
        why = f" (dbt: {unbuilt})" if unbuilt else ""
        was = "nothing" if built.since is None else built.since
        raise DestinationError(
            f"change set {CHANGES_NAMESPACE}.{model.name} is not built from watermark {mark} "
            f"(built from {was}){why}; the next `lakesync pipeline run` or "
            "`lakesync materialise` rebuilds it"
        )
    return spark.table(f"{CHANGES_NAMESPACE}.{model.name}").withColumnRenamed(
        DELETED_COLUMN, DELETED
    )
