"""Ship the lake's change sets to the declared destinations (``lakesync materialise``).

Per destination and table, the change set is a dbt model
(``lakesync_changes.changes__<destination>__<table>``, :mod:`lakesync.lakehouse.change_sets`): the
live rows of ``analytics.<table>`` and the rows gone from ``int_rows_merged`` past the destination's
watermark, two scans and no join (:func:`lakesync.lakehouse.change_set_sql.change_set_query`).
``lakesync pipeline run`` builds them in its own ``dbt build`` from the watermarks read just before;
here, the change sets not built from their destination's current watermark are first rebuilt in one
dbt invocation. Then each destination ships each table itself
(:meth:`lakesync.destinations.base.Destination.ship`, the lake's change set given as a
:class:`~lakesync.lakehouse.change_sets.LakeChangeSet`): read the watermark, check the change set
was built from it, have Spark's executors write the change set in parallel over JDBC into the
destination's staging table, then one set-based upsert and delete apply it and the watermark moves,
in one destination transaction. For BigQuery the executors write the change set as newline-delimited
JSON files, bulk-loaded into its staging table by one load job, then one ``MERGE`` and a delete
apply it and the watermark moves (no transaction there; a re-run converges). Other destinations (the
lake) get the change set through the driver. A run killed at any point leaves the watermark where
the last commit put it; the next run ships the same rows again, which converges (each row carries
its whole state). One failing destination or table is reported and never stops the others. For a
PostgreSQL destination the change-set model maps U+0000 to U+FFFD, which its ``text`` and ``jsonb``
refuse (:mod:`lakesync.destinations.statements`).

Routing, fan-out and tiering are composite destinations (:mod:`lakesync.destinations.routing`).
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
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lakesync.config import Config
from lakesync.destination_specs import DestinationSpec, shipped_on_their_own
from lakesync.destinations.base import Destination, ShipResult
from lakesync.destinations.factory import open_destination
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.destinations.routing import ColdTier, open_declared
from lakesync.errors import LakeSyncError
from lakesync.lakehouse.catalog import lake_catalog, require_lake
from lakesync.lakehouse.change_sets import (
    LakeChangeSet,
    build_vars,
    planned_change_sets,
    read_watermarks,
    schemas_by_gateway,
    stale_change_sets,
)
from lakesync.lakehouse.lifecycle import LakeColdTier
from lakesync.lakehouse.models import (
    lake_tables,
    prepare_project,
    table_columns,
    write_change_set_models,
    write_models,
)
from lakesync.lakehouse.runner import PipelineError, dbt_invoke, registered_table_schemas
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.spark import spark_session
from lakesync.schema import ColumnSpec, TableSchema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakesync.lakehouse.runner import DbtInvoker

__all__ = ["ShipResult", "ship", "tier"]

_log = logging.getLogger(__name__)


def ship(
    settings: LakeSettings,
    config: Config,
    *,
    spark: SparkSession | None = None,
    on_result: Callable[[ShipResult], None] | None = None,
    metrics: DestinationMetrics | None = None,
    on_progress: Callable[[str, str], None] | None = None,
    not_built: Mapping[str, str] | None = None,
    dbt: DbtInvoker | None = None,
) -> list[ShipResult]:
    """Ship every declared destination's tables, then tier those with a ``hot_window``; returns
    one result per (destination, table). ``on_progress`` gets the dbt nodes of a change-set
    rebuild (as :func:`lakesync.lakehouse.runner.dbt_invoke` reports them), run by ``dbt``
    (default: a new invoker). ``not_built``: the
    tables the pipeline run just before failed to build, with why
    (:attr:`lakesync.lakehouse.runner.PipelineResult.failed`): their current state is stale, so
    they are reported failed and not shipped; the others ship."""
    results, report = _collector(on_result)
    cold = LakeColdTier(settings, datetime.now(UTC))
    skipped = dict(not_built or {})
    unbuilt = _build_stale_change_sets(settings, config, on_progress, skipped, dbt)
    for spec, dest, schema, columns in _declared_tables(settings, config, metrics, report, cold):
        if schema.table in skipped:
            report(ShipResult(spec.name, schema.table,
                              error=f"not built by the pipeline run: {skipped[schema.table]}"))
            continue
        change_set = LakeChangeSet(spark or spark_session(settings), settings, schema.table,
                                   columns, schema.external_id_column, unbuilt)
        report(dest.ship(change_set))
    return results

def _build_stale_change_sets(
    settings: LakeSettings,
    config: Config,
    on_progress: Callable[[str, str], None] | None,
    not_built: Mapping[str, str],
    dbt: DbtInvoker | None,
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
        dbt_invoke(settings, args, on_progress, dbt)
    except PipelineError as exc:
        _log.warning("rebuilding change sets failed: %s", exc.message)
        return exc.message
    return None


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
    with ``evicted`` set. :func:`ship` does the same after shipping each table."""
    results, report = _collector(on_result)
    cold = LakeColdTier(settings, now or datetime.now(UTC))
    tiered = {n for n, s in config.destinations.items() if s.hot_window is not None}
    for _, dest, schema, columns in _declared_tables(
        settings, config, None, report, cold,
        lambda s: bool(tiered & {s.name, *s.routes.values()}),
    ):
        result = dest.tier(schema.table, columns, schema.external_id_column)
        if result is not None:
            report(result)
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
    cold: ColdTier,
    wanted: Callable[[DestinationSpec], bool] = lambda _: True,
) -> Iterator[tuple[DestinationSpec, Destination, TableSchema, list[ColumnSpec]]]:
    """Each declared destination (with its routes, secondaries and tiering over ``cold``) and each
    table it ships, with the table's lake columns; a destination that cannot be opened, and a
    table the lake cannot build (:func:`~lakesync.lakehouse.models.lake_tables`: a reserved
    name, columns typed differently by two gateways), are reported and skipped."""
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
            dest = open_declared(spec, config.destinations, open_one, metrics, cold)
        except LakeSyncError as exc:
            report(ShipResult(spec.name, "*", error=exc.message))
            continue
        with dest:
            for schema in schemas:
                if schema.table in unbuildable:
                    report(ShipResult(spec.name, schema.table, error=unbuildable[schema.table]))
                    continue
                yield spec, dest, schema, list(columns[schema.table])
