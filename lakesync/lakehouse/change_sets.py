"""Destination change sets as dbt models: which exist, which watermark each needs, and keeping
them built for the watermark their destination is at.

Every declared destination gets one change-set model per table it receives
(:class:`lakesync.lakehouse.models.ChangeSetModel`): a routed table belongs to the destination its
route
names, and each fan-out secondary has its own, since it keeps its own watermark. The models read
the destinations' watermarks from the var ``lakesync_watermarks`` and record the one they were
built from (table property ``lakesync.since``).

``lakesync pipeline run`` builds them inside its own ``dbt build``, with the watermarks read just
before (:func:`build_vars`), so shipping right after finds them ready. ``lakesync materialise``
alone (or after a destination moved on) rebuilds, in one dbt invocation, the change sets whose
recorded watermark is not their destination's (:func:`stale_change_sets`), unless a shipment of
it already took the destination to that watermark and the lake has not changed since it was
built (``lakesync.drained``, :class:`BuiltChangeSet`): then there is nothing to ship. A change
set built from
watermark ``W`` holds every row past ``W`` at the lake state it was built from; shipping it to a
destination at ``W`` is exactly right, and rows the lake merged after the build are past the
watermark the shipment leaves, so the next change set has them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sqlglot import exp

from lakesync.config import Config
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import DestinationError
from lakesync.destinations.factory import open_destination
from lakesync.destinations.statements import DELETED
from lakesync.errors import LakeSyncError
from lakesync.lakehouse.catalog import changes_data, lake_catalog, open_catalog
from lakesync.lakehouse.models import (
    DRAINED_PROPERTY,
    SINCE_PROPERTY,
    ChangeSetModel,
    TableColumns,
    plan_change_sets,
)
from lakesync.lakehouse.registry import registered_schemas, schemas_in_force
from lakesync.lakehouse.settings import (
    ANALYTICS_NAMESPACE,
    CHANGES_NAMESPACE,
    LANDING_NAMESPACE,
    LakeSettings,
)
from lakesync.schema import DELETED_COLUMN, ColumnSpec, TableSchema

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "BuiltChangeSet",
    "LakeChangeSet",
    "Watermarks",
    "build_vars",
    "built_change_sets",
    "drop_undeclared",
    "mark_drained",
    "planned_change_sets",
    "read_watermarks",
    "schemas_by_gateway",
    "stale_change_sets",
]

_log = logging.getLogger(__name__)

NONE = -1
"""The watermark of a destination that was never shipped to (every row is past it)."""


def schemas_by_gateway(settings: LakeSettings, config: Config) -> dict[str, list[TableSchema]]:
    """Each gateway's table schemas in force (:func:`~lakesync.lakehouse.registry.
    schemas_in_force`): those published to the lake's registry, with what ``config``'s
    gateways declare and the registry lacks."""
    return schemas_in_force(registered_schemas(open_catalog(settings)), config)


def planned_change_sets(
    settings: LakeSettings, config: Config, columns: TableColumns
) -> list[ChangeSetModel]:
    """The change-set models ``config``'s destinations need, for the tables in ``columns`` (the
    lake's typed tables)."""
    if not config.destinations:
        return []
    tables = {
        gw: [s.table for s in schemas if s.table in columns]
        for gw, schemas in schemas_by_gateway(settings, config).items()
    }
    return plan_change_sets(config.destinations, tables, columns)


@dataclass(frozen=True, slots=True)
class Watermarks:
    """Each change set's destination watermark (``NONE`` if never shipped), and the change sets
    whose destination could not be read (with why)."""

    positions: dict[str, int]
    """Model name -> watermark."""
    unreadable: dict[str, str]
    """Model name -> the error reading its destination's watermark."""

    def as_var(self, models: Sequence[ChangeSetModel]) -> dict[str, dict[str, int]]:
        """The ``lakesync_watermarks`` var: ``{destination: {table: position}}``."""
        out: dict[str, dict[str, int]] = {}
        for m in models:
            if m.name in self.positions:
                out.setdefault(m.destination, {})[m.table] = self.positions[m.name]
        return out


def read_watermarks(
    settings: LakeSettings,
    destinations: Mapping[str, DestinationSpec],
    models: Sequence[ChangeSetModel],
) -> Watermarks:
    """Read each change set's destination watermark; a destination that cannot be opened or
    read is reported per model, never raised."""
    positions: dict[str, int] = {}
    unreadable: dict[str, str] = {}
    by_destination: dict[str, list[ChangeSetModel]] = {}
    for m in models:
        by_destination.setdefault(m.destination, []).append(m)
    for name, wanted in by_destination.items():
        try:
            with open_destination(destinations[name], catalog=lake_catalog(settings)) as dest:
                for m in wanted:
                    found = dest.watermark(m.table)
                    positions[m.name] = NONE if found is None else found
        except LakeSyncError as exc:
            for m in wanted:
                if m.name not in positions:
                    unreadable[m.name] = exc.message
    return Watermarks(positions, unreadable)


def build_vars(marks: Watermarks, models: Sequence[ChangeSetModel]) -> list[str]:
    """dbt arguments passing the watermarks (``--vars``)."""
    return ["--vars", json.dumps({"lakesync_watermarks": marks.as_var(models)})]


@dataclass(frozen=True, slots=True)
class BuiltChangeSet:
    """What a change-set table says of itself."""

    since: int | None
    """The watermark it was built from (None: never built, or its last build did not finish)."""
    drained: int | None
    """The watermark a shipment of it left its destination at: at the lake state it was built
    from, nothing is past that watermark."""
    current: bool
    """It was built after the last data change of the tables it reads."""

    def serves(self, mark: int) -> Literal["ship", "empty", "rebuild"]:
        """For a destination at watermark ``mark``: ship the table as built, ship nothing (it
        was shipped up to ``mark`` and the lake has not changed since it was built), or it must
        be rebuilt first."""
        if self.since == mark:
            return "ship"
        if self.drained == mark and self.current:
            return "empty"
        return "rebuild"


UNBUILT = BuiltChangeSet(None, None, False)

def _last_change_ms(table: Table) -> int:
    """When ``table``'s data last changed (its newest snapshot that added or removed files)."""
    for snap in sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True):
        if changes_data(snap):
            return snap.timestamp_ms
    return 0


def built_change_sets(
    settings: LakeSettings, models: Sequence[ChangeSetModel]
) -> dict[str, BuiltChangeSet]:
    """What each change-set table says of itself (:data:`UNBUILT` when it does not exist)."""
    catalog = open_catalog(settings)
    out = dict.fromkeys((m.name for m in models), UNBUILT)
    if (CHANGES_NAMESPACE,) not in catalog.list_namespaces():
        return out
    existing = {ident[-1] for ident in catalog.list_tables(CHANGES_NAMESPACE)}
    changed: dict[str, int] = {}

    def last_change(ident: str) -> int:
        if ident not in changed:
            found = catalog.table_exists(ident)
            changed[ident] = _last_change_ms(catalog.load_table(ident)) if found else 2**63
        return changed[ident]

    for m in models:
        if m.name not in existing:
            continue
        table = catalog.load_table(f"{CHANGES_NAMESPACE}.{m.name}")
        props, snap = table.properties, table.current_snapshot()
        inputs = (f"{ANALYTICS_NAMESPACE}.{m.table}", f"{LANDING_NAMESPACE}.int_rows_merged")
        current = snap is not None and all(snap.timestamp_ms >= last_change(i) for i in inputs)
        out[m.name] = BuiltChangeSet(
            _int(props.get(SINCE_PROPERTY)), _int(props.get(DRAINED_PROPERTY)), current
        )
    return out


def _int(value: str | None) -> int | None:
    return None if value is None else int(value)


def mark_drained(settings: LakeSettings, model: ChangeSetModel, position: int) -> None:
    """Record that a shipment of ``model`` left its destination at watermark ``position`` (best
    effort: without it the next ``lakesync materialise`` rebuilds the change set, which is
    correct, only slower)."""
    try:
        table = open_catalog(settings).load_table(f"{CHANGES_NAMESPACE}.{model.name}")
        with table.transaction() as tx:
            tx.set_properties({DRAINED_PROPERTY: str(position)})
    except Exception as exc:
        _log.warning("could not mark change set %s shipped through %d (%s); the next "
                     "materialise rebuilds it", model.name, position, exc)


@dataclass(frozen=True, slots=True)
class LakeChangeSet:
    """One table's change sets as built in the lake, for every destination that receives it
    (:class:`lakesync.destinations.base.ChangeSet`): each destination's is the change-set
    model built from its watermark. ``unbuilt``: dbt's error if the rebuild of stale change
    sets just before failed (a change set it left stale reports it)."""

    spark: SparkSession
    settings: LakeSettings
    table: str
    columns: Sequence[ColumnSpec]
    external_id: str | None
    unbuilt: str | None = None

    def _model(self, destination: DestinationSpec) -> ChangeSetModel:
        return ChangeSetModel(destination.name, destination.gateway, self.table, ())

    def rows(self, destination: DestinationSpec, since: int | None) -> DataFrame | None:
        """The change-set table of ``destination``, which must serve its watermark ``since``,
        with the staging column names; None when there is nothing past ``since``."""
        model = self._model(destination)
        mark = NONE if since is None else since
        built = built_change_sets(self.settings, [model])[model.name]
        serves = built.serves(mark)
        if serves == "empty":
            return None
        if serves == "rebuild":
            why = f" (dbt: {self.unbuilt})" if self.unbuilt else ""
            was = "nothing" if built.since is None else built.since
            raise DestinationError(
                f"change set {CHANGES_NAMESPACE}.{model.name} is not built from watermark "
                f"{mark} (built from {was}){why}; the next `lakesync pipeline run` or "
                "`lakesync materialise` rebuilds it"
            )
        return self.spark.table(f"{CHANGES_NAMESPACE}.{model.name}").withColumnRenamed(
            DELETED_COLUMN, DELETED
        )

    def shipped(self, destination: DestinationSpec, position: int | None) -> None:
        """Mark the change set drained at ``position`` (:func:`mark_drained`)."""
        mark_drained(self.settings, self._model(destination),
                     NONE if position is None else position)


def stale_change_sets(
    settings: LakeSettings, marks: Watermarks, models: Sequence[ChangeSetModel]
) -> list[ChangeSetModel]:
    """The change sets that must be rebuilt before their destination's current watermark can
    be served (unreadable destinations left out: their shipment reports the error)."""
    built = built_change_sets(settings, models)
    return [
        m for m in models
        if m.name in marks.positions and built[m.name].serves(marks.positions[m.name]) == "rebuild"
    ]


def drop_undeclared(
    settings: LakeSettings, spark: SparkSession, models: Sequence[ChangeSetModel]
) -> list[str]:
    """Drop (with their files) the change-set tables no declared destination needs any more
    (a destination or table removed from the configuration). Returns their names."""
    catalog = open_catalog(settings)
    if (CHANGES_NAMESPACE,) not in catalog.list_namespaces():
        return []
    wanted = {m.name for m in models}
    gone = sorted(i[-1] for i in catalog.list_tables(CHANGES_NAMESPACE) if i[-1] not in wanted)
    for name in gone:
        table = exp.Table(this=exp.to_identifier(name, quoted=True),
                          db=exp.to_identifier(CHANGES_NAMESPACE))
        drop = exp.Drop(tables=[table], kind="TABLE", exists=True, purge=True)
        spark.sql(drop.sql(dialect="spark"))
        _log.info("dropped change set %s.%s: no declared destination needs it", CHANGES_NAMESPACE,
                  name)
    return gone
