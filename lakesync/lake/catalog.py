"""pyiceberg access to the shared JDBC catalog, and the landing table's schema.

pyiceberg's ``SqlCatalog`` and Spark's ``JdbcCatalog`` share the same catalog tables (old layout,
created by the bootstrap), so the catalog name must equal Spark's (``lake``).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from lakesync.lake.settings import CATALOG_NAME, LANDING_NAMESPACE, LANDING_TABLE, LakeSettings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

__all__ = [
    "LANDING_IDENTIFIER",
    "POSITION_PROPERTY",
    "ensure_landing_table",
    "flushed_position",
    "landing_schema",
    "open_catalog",
]

LANDING_IDENTIFIER = f"{LANDING_NAMESPACE}.{LANDING_TABLE}"
# Snapshot summary key: the hot-log position (ingest HLC) the landing table is complete through.
POSITION_PROPERTY = "lakesync.flushed-through"


class _QuietV0Layout(logging.Filter):
    """Drop pyiceberg's notice about the old catalog layout: it is deliberate (STACK.md trap 2)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "v0 schema" not in record.getMessage()


logging.getLogger("pyiceberg.catalog.sql").addFilter(_QuietV0Layout())


def open_catalog(settings: LakeSettings) -> SqlCatalog:
    """A pyiceberg ``SqlCatalog`` over the same catalog tables and warehouse Spark uses."""
    from pyiceberg.catalog.sql import SqlCatalog

    props: dict[str, Any] = {
        "uri": settings.sqlalchemy_uri(),
        "warehouse": settings.warehouse,
        "init_catalog_tables": "false",
    }
    return SqlCatalog(CATALOG_NAME, **props)


def landing_schema() -> Any:
    """Iceberg schema of ``lakesync.landing``: one row per accepted delta.

    ``hlc`` is the client HLC, a uint64: stored as ``decimal(20,0)`` because values ≥ 2^63 do not
    fit a signed long. ``ingest_hlc`` is the gateway's own ingest clock (wall time now, so < 2^63)
    and is a long; it is the landing position and what dbt increments filter on. ``columns_json`` is
    the delta's ``[{column, value}]`` list as JSON; ``cells`` holds the same cells with each value
    JSON-encoded on its own, so strings, numbers, booleans, null and nested JSON stay
    distinguishable in SQL.
    """
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        DecimalType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
        TimestamptzType,
    )

    cell = StructType(
        NestedField(13, "column", StringType(), required=True),
        NestedField(14, "value_json", StringType(), required=True),
    )
    return Schema(
        NestedField(1, "gateway_id", StringType(), required=True),
        NestedField(2, "ingest_hlc", LongType(), required=True),
        NestedField(3, "delta_id", StringType(), required=True),
        NestedField(4, "op", StringType(), required=True),
        NestedField(5, "table_name", StringType(), required=True),
        NestedField(6, "row_id", StringType(), required=True),
        NestedField(7, "client_id", StringType(), required=True),
        NestedField(8, "hlc", DecimalType(20, 0), required=True),
        NestedField(9, "columns_json", StringType(), required=True),
        NestedField(10, "cells", ListType(12, cell, element_required=True), required=True),
        NestedField(11, "ingested_at", TimestamptzType(), required=True),
    )


def ensure_landing_table(catalog: Catalog) -> Table:
    """Create the ``lakesync`` namespace and the landing table if missing; return the table.

    Partitioned by gateway (per-tenant queries read only their files); files are written in ingest
    order, so per-file min/max stats on ``ingest_hlc`` prune incremental reads. (A day transform
    would need the optional ``pyiceberg-core`` wheel for appends.)
    """
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(LANDING_NAMESPACE)
    if catalog.table_exists(LANDING_IDENTIFIER):
        return catalog.load_table(LANDING_IDENTIFIER)
    spec = PartitionSpec(
        PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="gateway_id")
    )
    try:
        return catalog.create_table(
            LANDING_IDENTIFIER,
            schema=landing_schema(),
            partition_spec=spec,
            properties={"format-version": "2", "write.parquet.compression-codec": "zstd"},
        )
    except TableAlreadyExistsError:
        return catalog.load_table(LANDING_IDENTIFIER)


def flushed_position(table: Table) -> int | None:
    """The hot-log position the table is complete through, per the newest snapshot recording one.

    Walks back from the current snapshot because maintenance commits (compaction, expiry) do not
    carry the property; None when nothing was ever flushed.
    """
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        if summary is not None and POSITION_PROPERTY in summary.additional_properties:
            return int(summary.additional_properties[POSITION_PROPERTY])
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return None
