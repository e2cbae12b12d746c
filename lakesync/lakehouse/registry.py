"""The lake's copy of the gateways' registered table schemas: ``lakesync.table_schemas``.

Schemas are registered on the gateway (``POST /v1/admin/schema/{gw}`` or ``lakesync.yaml``) and
kept in its hot-log store. The gateway's lake job publishes them into this small Iceberg table next
to the landing table (it is the table's only writer), so the pipeline, ``lakesync pipeline as-of``
and analysts find every registered table from the catalog alone: on the embedded default, and on a
cluster whose catalog lives in PostgreSQL, without reaching into the gateway's store.

One row per (gateway, table): the schema as the gateway's wire JSON. A publish that changes
nothing commits nothing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakesync.config import Config, load_config
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings
from lakesync.schema import TableSchema, parse_schema, schema_to_wire

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = [
    "REGISTRY_IDENTIFIER",
    "ensure_registry_table",
    "publish_schemas",
    "registered_schemas",
    "registered_table_schemas",
    "registry_rows",
]

REGISTRY_IDENTIFIER = f"{LANDING_NAMESPACE}.table_schemas"

RegisteredSchema = tuple[str, TableSchema]
"""``(gateway_id, schema)``."""


def _registry_schema() -> Any:
    # heavy, optional (extra "pipeline")
    from pyiceberg.schema import Schema  # noqa: PLC0415
    from pyiceberg.types import NestedField, StringType, TimestamptzType  # noqa: PLC0415

    return Schema(
        NestedField(1, "gateway_id", StringType(), required=True),
        NestedField(2, "table_name", StringType(), required=True),
        NestedField(3, "schema_json", StringType(), required=True),
        NestedField(4, "published_at", TimestamptzType(), required=True),
    )


def _key(entries: Iterable[RegisteredSchema]) -> list[tuple[str, str, str]]:
    """Comparable form: sorted ``(gateway, table, canonical schema JSON)``."""
    return sorted(
        (gw, s.table, json.dumps(schema_to_wire(s), sort_keys=True, separators=(",", ":")))
        for gw, s in entries
    )


def registry_rows(entries: Iterable[RegisteredSchema], published_at: datetime) -> pa.Table:
    """The registry's rows as an Arrow table (pure: no I/O)."""
    # heavy, optional (extra "pipeline")
    import pyarrow as pa  # noqa: PLC0415

    rows = _key(entries)
    return pa.Table.from_pydict(
        {
            "gateway_id": [gw for gw, _, _ in rows],
            "table_name": [t for _, t, _ in rows],
            "schema_json": [j for _, _, j in rows],
            "published_at": [published_at] * len(rows),
        },
        schema=_registry_schema().as_arrow(),
    )


def ensure_registry_table(catalog: Catalog) -> Table:
    """Create ``lakesync.table_schemas`` (and its namespace) if missing; return it."""
    # heavy, optional (extra "pipeline")
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError  # noqa: PLC0415

    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(LANDING_NAMESPACE)
    if catalog.table_exists(REGISTRY_IDENTIFIER):
        return catalog.load_table(REGISTRY_IDENTIFIER)
    try:
        return catalog.create_table(
            REGISTRY_IDENTIFIER, schema=_registry_schema(), properties={"format-version": "2"}
        )
    except TableAlreadyExistsError:
        return catalog.load_table(REGISTRY_IDENTIFIER)


def _read(table: Table) -> list[RegisteredSchema]:
    arrow = table.scan(selected_fields=("gateway_id", "schema_json")).to_arrow()
    return [
        (gw, parse_schema(json.loads(raw), stored=True))
        for gw, raw in zip(
            arrow.column("gateway_id").to_pylist(),
            arrow.column("schema_json").to_pylist(),
            strict=True,
        )
    ]


def registered_schemas(catalog: Catalog) -> list[RegisteredSchema]:
    """Every published ``(gateway_id, schema)``; empty when nothing was ever published."""
    if not catalog.table_exists(REGISTRY_IDENTIFIER):
        return []
    return _read(catalog.load_table(REGISTRY_IDENTIFIER))


def registered_table_schemas(
    settings: LakeSettings, config: Config | None = None
) -> list[TableSchema]:
    """Every registered schema: the ones the gateways published to ``lakesync.table_schemas``
    (admin routes and their ``lakesync.yaml``) plus those in ``config`` (default: this process's
    ``lakesync.yaml``), both kept, so :func:`~lakesync.lakehouse.models.table_columns` unions a
    column the configuration has and the published schema not yet."""
    config = config or load_config()
    published = [s for _, s in registered_schemas(open_catalog(settings))]
    return [*published, *(s for gw in config.gateways.values() for s in gw.schemas)]


def publish_schemas(
    catalog: Catalog,
    entries: Iterable[RegisteredSchema],
    *,
    now: datetime | None = None,
) -> bool:
    """Make the registry hold exactly ``entries``; True when that needed a commit."""
    wanted = list(entries)
    table = ensure_registry_table(catalog)
    current = _read(table)
    if _key(current) == _key(wanted):
        return False
    rows = registry_rows(wanted, now or datetime.now(UTC))
    if current:
        table.overwrite(rows)
    else:
        table.append(rows)
    return True
