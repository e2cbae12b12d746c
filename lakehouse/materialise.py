"""Ship the lake's change sets to the declared destinations (``lakesync materialise``).

Per destination and table: read the destination's watermark, select the change set since it
from the dbt models (``int_rows_merged`` joined to ``analytics.<table>``, see
:func:`destinations.statements.select_change_set`), have Spark's executors write it in parallel
over JDBC into the destination's staging table, then one set-based upsert and delete apply it
and the watermark moves, in one destination transaction. A destination without a JDBC loader
here (BigQuery) gets the change set through its client instead. A run killed at any point
leaves the watermark where the last commit put it; the next run ships the same rows again,
which converges (each row carries its whole state). One failing destination or table is
reported and never stops the others.

A destination with ``routes`` ships each routed table into the destination its route names; one
with ``secondaries`` ships through a fan-out (the primary's change set is collected on the driver
and applied to the primary, then best effort to each secondary; a secondary's failure is logged,
counted in :class:`~destinations.metrics.DestinationMetrics` and in the result's
``secondary_failures``, and fails nothing). Destinations named by another's routes or
secondaries are shipped only through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from destinations.base import Change, Destination
from destinations.factory import open_destination
from destinations.metrics import DestinationMetrics
from destinations.routing import FanOutDestination, open_declared
from destinations.sql import SqlDestination
from destinations.statements import TableLayout, select_change_set, staging_name
from lakehouse.catalog import open_catalog, require_lake
from lakehouse.models import table_columns
from lakehouse.settings import ANALYTICS_NAMESPACE, LANDING_NAMESPACE, LakeSettings
from lakehouse.spark import spark_session
from lakesync.config import Config
from lakesync.destinations import DestinationSpec, shipped_on_their_own
from lakesync.errors import LakeSyncError
from lakesync.schema import TableSchema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ShipResult", "materialise"]


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
    """Seconds per step: ``prepare`` (table, watermark), ``select+load`` (the change set computed
    on Spark and written to staging), ``apply`` (upsert, delete, watermark)."""
    secondary_failures: int = 0
    """Failed best-effort writes to fan-out secondaries while shipping this table."""


def _schemas_by_gateway(settings: LakeSettings, config: Config) -> dict[str, list[TableSchema]]:
    from lakehouse.registry import registered_schemas

    out: dict[str, dict[str, TableSchema]] = {}
    for gw, schema in registered_schemas(open_catalog(settings)):
        out.setdefault(gw, {})[schema.table] = schema
    for gw, gateway in config.gateways.items():
        for schema in gateway.schemas:
            out.setdefault(gw, {}).setdefault(schema.table, schema)
    return {gw: list(tables.values()) for gw, tables in out.items()}


def materialise(
    settings: LakeSettings,
    config: Config,
    *,
    spark: SparkSession | None = None,
    on_result: Callable[[ShipResult], None] | None = None,
    metrics: DestinationMetrics | None = None,
) -> list[ShipResult]:
    """Ship every declared destination's tables; returns one result per (destination, table)."""
    require_lake(settings)
    by_gateway = _schemas_by_gateway(settings, config)
    # The lake keeps one typed table per name (the union of every gateway's columns).
    columns = table_columns(s for schemas in by_gateway.values() for s in schemas)
    results: list[ShipResult] = []

    def report(result: ShipResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    def open_one(spec: DestinationSpec) -> Destination:
        return open_destination(spec, lake=settings)

    for spec in shipped_on_their_own(config.destinations):
        schemas = [s for s in by_gateway.get(spec.gateway, []) if spec.ships(s.table)]
        try:
            dest = open_declared(spec, config.destinations, open_one, metrics)
        except LakeSyncError as exc:
            report(ShipResult(spec.name, "*", error=exc.message))
            continue
        with dest:
            session = spark or spark_session(settings)
            for schema in schemas:
                failed = _secondary_failures(dest)
                result = _ship_table(
                    session, spec, dest.for_table(schema.table), schema, columns[schema.table]
                )
                failed = _secondary_failures(dest) - failed
                report(replace(result, secondary_failures=failed) if failed else result)
    return results


def _secondary_failures(dest: Destination) -> int:
    return sum(dest.failures.values()) if isinstance(dest, FanOutDestination) else 0


def _ship_table(
    spark: SparkSession,
    spec: DestinationSpec,
    dest: Destination,
    schema: TableSchema,
    columns: Sequence[tuple[str, str]],
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
        step("prepare")
        frame = spark.sql(
            select_change_set(table, columns, (LANDING_NAMESPACE, "int_rows_merged"),
                              (ANALYTICS_NAMESPACE,)),
            args={"gateway_id": spec.gateway, "table_name": table,
                  "since": Decimal(-1 if since is None else since)},
        )
        if isinstance(dest, SqlDestination):
            # One Spark job: the query's rows go straight to the staging table; the database
            # then counts them and finds their greatest position inside the apply transaction.
            _load_staging(dest, layout, frame)
            step("select+load")
            count, position = dest.apply_staged(layout)
        else:
            changes, top = _collect(layout, frame)
            step("select+load")
            count, position = len(changes), top
            if changes:
                dest.apply_changes(layout, changes, position)
        step("apply")
        if count == 0:
            position = since
    except LakeSyncError as exc:
        return ShipResult(spec.name, table, error=exc.message,
                          elapsed_s=time.monotonic() - started)
    except Exception as exc:  # Spark's errors (Py4J, analysis) name no LakeSync type
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return ShipResult(spec.name, table, error=f"Spark: {detail}",
                              elapsed_s=time.monotonic() - started)
        raise
    return ShipResult(spec.name, table, count, position,
                      elapsed_s=time.monotonic() - started, steps=steps)


def _load_staging(dest: SqlDestination, layout: TableLayout, rows: DataFrame) -> None:
    """Executors append the change set to the (emptied) staging table over JDBC, in parallel."""
    dest.prepare_staging(layout)
    rows.write.jdbc(
        dest.jdbc.url,
        staging_name(layout, dest.dialect),
        mode="append",
        properties={**dest.jdbc.properties, "batchsize": "10000"},
    )


def _collect(layout: TableLayout, rows: DataFrame) -> tuple[list[Change], int | None]:
    """The change set on the driver, and its greatest position."""
    names = layout.column_names
    out: list[Change] = []
    top: int | None = None
    for row in rows.toLocalIterator():
        values: dict[str, Any] = {n: row[n] for n in names}
        out.append(Change(row["row_id"], {} if row["_deleted"] else values, bool(row["_deleted"])))
        top = max(top or 0, int(row["_position"]))
    return out, top
