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
from lakesync.schema import TableSchema, merge_declared, parse_schema, schema_to_wire

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
    "schemas_in_force",
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


def schemas_in_force(
    published: Iterable[RegisteredSchema], config: Config
) -> dict[str, list[TableSchema]]:
    """Each gateway's table schemas (pure): the published one of each ``(gateway, table)``
    wins, with the columns only ``config``'s declaration has added to it (as the gateway merges
    ``lakesync.yaml`` at its next start, :func:`lakesync.schema.merge_declared`; its options
    stay the published ones); a declared table never published is taken as declared. A column
    the file declares narrower than the published one (widened through the admin API since)
    keeps its published type: the stale file is not another gateway."""
    out: dict[str, dict[str, TableSchema]] = {}
    for gw, schema in published:
        out.setdefault(gw, {})[schema.table] = schema
    for gw, gateway in config.gateways.items():
        tables = out.setdefault(gw, {})
        for declared in gateway.schemas:
            stored = tables.get(declared.table)
            tables[declared.table] = (
                declared if stored is None else merge_declared(stored, declared, declared)[0]
            )
    return {gw: list(tables.values()) for gw, tables in out.items()}


def registered_table_schemas(
    settings: LakeSettings, config: Config | None = None
) -> list[TableSchema]:
    """Every gateway's registered schemas (:func:`schemas_in_force`): the ones the gateways
    published to ``lakesync.table_schemas`` (admin routes and their ``lakesync.yaml``) with
    what ``config`` (default: this process's ``lakesync.yaml``) declares and they lack yet."""
    published = registered_schemas(open_catalog(settings))
    by_gateway = schemas_in_force(published, config or load_config())
    return [s for schemas in by_gateway.values() for s in schemas]


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
