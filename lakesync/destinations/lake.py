"""The lake itself as a destination: Iceberg tables in a namespace of the lake's catalog.

URL: ``lake://NAMESPACE`` (an identifier; not the lake's own ``lakesync``, ``analytics`` or
``lakesync_changes`` namespaces, which the pipeline owns). Each table has the docs/protocol.md
§11 layout as Iceberg columns (json and ``props`` as JSON text, ``synced_at`` / ``deleted_at``
as UTC timestamps). A change set is applied to the table's rows and written back with one Iceberg
overwrite; the watermark is a table property (``lakesync.watermark.<gateway>``) set in the same
Iceberg transaction, so rows and watermark commit together or not at all. The overwrite rewrites
the whole table: this adapter is meant for exports of modest size next to the lake's own
``analytics`` tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lakesync.column_types import iceberg_type
from lakesync.delta import validate_identifier
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import (
    Change,
    Destination,
    DestinationError,
    TieringMark,
    latest_per_row,
    normalise_row,
    widened_value,
)
from lakesync.destinations.statements import Columns, TableLayout, column_spec
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.schema import RESERVED_NAMESPACES, ColumnSpec, ColumnType

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = ["LakeDestination", "lake_namespace"]

WATERMARK_PROPERTY = "lakesync.watermark."


def lake_namespace(spec: DestinationSpec, url: str) -> str:
    """The namespace of a ``lake://NAMESPACE`` URL, checked."""
    namespace = urlsplit(url).netloc
    try:
        validate_identifier(namespace, "lake namespace")
    except LakeSyncError:
        raise ConfigError(
            f"destination {spec.name!r}: a lake url is lake://namespace (an identifier)"
        ) from None
    if namespace.lower() in RESERVED_NAMESPACES:
        raise ConfigError(
            f"destination {spec.name!r}: namespace {namespace!r} belongs to the pipeline; "
            "ship into a namespace of your own, e.g. lake://exports"
        )
    return namespace


def _iceberg_type(spec: ColumnSpec) -> Any:
    """A column's Iceberg type as a pyiceberg type (:func:`lakesync.column_types.iceberg_type`
    names it in the Iceberg spec's notation, which a field parses)."""
    # heavy, optional (extra "pipeline")
    from pyiceberg.types import NestedField  # noqa: PLC0415

    return NestedField(1, spec.name, iceberg_type(spec)).field_type


def _fields(layout: TableLayout) -> list[tuple[str, Any]]:
    """(name, Iceberg type) of every column the layout's table holds, in order: the schema's
    columns typed by :func:`lakesync.column_types.iceberg_type` (json as its text)."""
    # heavy, optional (extra "pipeline")
    from pyiceberg.types import StringType, TimestamptzType  # noqa: PLC0415

    out: list[tuple[str, Any]] = [("row_id", StringType())]
    out += [(c.name, _iceberg_type(c)) for c in layout.columns]
    out += [("props", StringType()), ("synced_at", TimestamptzType())]
    if layout.delete == "soft":
        out.append(("deleted_at", TimestamptzType()))
    return out


class LakeDestination(Destination):
    """Tables in one namespace of the lake's Iceberg catalog (pyiceberg)."""

    lives_in_lake = True

    def __init__(self, spec: DestinationSpec, catalog: Catalog, namespace: str) -> None:
        self.spec = spec
        self._catalog = catalog
        self._namespace = namespace

    def _where(self) -> str:
        return f"destination {self.spec.name!r} (lake namespace {self._namespace})"

    @contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        # pyiceberg, pyarrow and the catalog's SQL driver raise their own types.
        try:
            yield
        except LakeSyncError:
            raise
        except Exception as exc:
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DestinationError(f"{self._where()}: {what} failed: {detail}") from None

    def _identifier(self, table: str) -> str:
        return f"{self._namespace}.{table}"

    def _load(self, table: str) -> Table | None:
        # heavy, optional (extra "pipeline")
        from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415

        try:
            return self._catalog.load_table(self._identifier(table))
        except NoSuchTableError:
            return None

    def layout(
        self, table: str, columns: Columns, external_id: str | None = None
    ) -> TableLayout:
        specs = [column_spec(c) for c in columns]
        return TableLayout(table, specs, self.spec.delete, external_id, (self._namespace,))

    def ensure_table(self, layout: TableLayout) -> None:
        # heavy, optional (extra "pipeline")
        from pyiceberg.schema import Schema  # noqa: PLC0415
        from pyiceberg.types import NestedField  # noqa: PLC0415

        with self._failing(f"creating table {layout.table!r}"):
            self._catalog.create_namespace_if_not_exists(self._namespace)
            found = self._load(layout.table)
            if found is None:
                fields = [
                    NestedField(i, name, kind, required=False)
                    for i, (name, kind) in enumerate(_fields(layout), start=1)
                ]
                self._catalog.create_table_if_not_exists(
                    self._identifier(layout.table), Schema(*fields)
                )
                return
            have = set(found.schema().column_names)
            missing = [(n, k) for n, k in _fields(layout) if n not in have]
            if missing:
                with found.update_schema() as update:
                    for name, kind in missing:
                        update.add_column(name, kind)
            self._widen(layout, found)

    def _widen(self, layout: TableLayout, found: Table) -> None:
        """Rebuild the table in the layout's types when the schema widened a column: Iceberg
        changes a type in place only from int to long, float to double and to a wider decimal
        of the same scale, so the rows are rewritten with each value converted
        (:func:`~lakesync.destinations.base.widened_value`) into a table made anew with the
        same properties (the watermarks). An interrupted rebuild leaves no table, or an empty
        one without watermarks: the next shipment then ships the table whole."""
        # heavy, optional (extra "pipeline")
        import pyarrow as pa  # noqa: PLC0415
        from pyiceberg.schema import Schema  # noqa: PLC0415
        from pyiceberg.types import NestedField  # noqa: PLC0415

        types = {f.name: f.field_type for f in found.schema().fields}
        changed = {
            c.name: _spec_of(c.name, types[c.name]) for c in layout.columns
            if c.name in types and str(types[c.name]) != str(iceberg_type(c))
        }
        if not changed:
            return
        new = {c.name: c for c in layout.columns}
        rows = found.scan().to_arrow().to_pylist()
        for row in rows:
            for name, old in changed.items():
                row[name] = widened_value(old, new[name], row.get(name))
        fields = [
            NestedField(i, f.name, _iceberg_type(new[f.name]) if f.name in changed
                        else f.field_type, required=False)
            for i, f in enumerate(found.schema().fields, start=1)
        ]
        properties = dict(found.properties)
        identifier = self._identifier(layout.table)
        self._catalog.drop_table(identifier)
        table = self._catalog.create_table(identifier, Schema(*fields), properties=properties)
        if rows:
            table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))

    def _table(self, layout: TableLayout) -> Table:
        found = self._load(layout.table)
        if found is None:
            raise DestinationError(
                f"{self._where()}: table {layout.table!r} does not exist (ensure_table first)"
            )
        return found

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        # heavy, optional (extra "pipeline")
        import pyarrow as pa  # noqa: PLC0415
        import pyarrow.compute as pc  # noqa: PLC0415

        what = f"applying changes to {layout.table!r}"
        with self._failing(what):
            _check_json(layout, changes, f"{self._where()}: {what} failed")
            latest = latest_per_row(changes)
            table = self._table(layout)
            current = table.scan().to_arrow()
            # Only the changed rows go through Python; the others stay Arrow columns.
            ids = pa.array([c.row_id for c in latest], type=current.schema.field("row_id").type)
            changed = pc.is_in(current["row_id"], value_set=ids)
            rows = {r["row_id"]: r for r in current.filter(changed).to_pylist()}
            _apply(layout, rows, latest, datetime.now(UTC))
            data = pa.concat_tables([
                current.filter(pc.invert(changed)),
                pa.Table.from_pylist(list(rows.values()), schema=current.schema),
            ])
            with table.transaction() as tx:
                if current.num_rows == 0:
                    tx.append(data)  # nothing to replace (overwrite would warn of that)
                else:
                    tx.overwrite(data)
                if position is not None:
                    tx.set_properties({WATERMARK_PROPERTY + self.spec.gateway: str(position)})

    def _rows(self, layout: TableLayout, what: str) -> list[dict[str, Any]]:
        names = [n for n, _ in _fields(layout)]
        with self._failing(what):
            found = self._table(layout).scan(selected_fields=tuple(names)).to_arrow()
        return [normalise_row(layout, r) for r in found.select(names).to_pylist()]

    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        return sorted(self._rows(layout, f"reading {layout.table!r}"), key=lambda r: r["row_id"])

    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        rows = self._rows(layout, f"reading changes of {layout.table!r}")
        changed = sorted(
            (r for r in rows if r["synced_at"] > since), key=lambda r: (r["synced_at"], r["row_id"])
        )
        if limit is not None and len(changed) > limit:
            cut = changed[limit - 1]["synced_at"]
            changed = [r for r in changed if r["synced_at"] <= cut]
        return changed

    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        """(A lake destination has no hot window: ``mark`` is not kept.)"""
        # heavy, optional (extra "pipeline")
        import pyarrow as pa  # noqa: PLC0415
        import pyarrow.compute as pc  # noqa: PLC0415

        if not row_ids:
            return 0
        with self._failing(f"evicting old rows of {layout.table!r}"):
            table = self._table(layout)
            current = table.scan().to_arrow()
            old = pc.is_in(current["row_id"], value_set=pa.array(row_ids, pa.string()))
            kept = current.filter(pc.invert(old))
            if kept.num_rows < current.num_rows:
                table.overwrite(kept)
        return int(current.num_rows - kept.num_rows)

    def watermark(self, table: str) -> int | None:
        with self._failing("reading the watermark"):
            found = self._load(table)
        if found is None:
            return None
        value = found.properties.get(WATERMARK_PROPERTY + self.spec.gateway)
        return None if value is None else int(value)


def _spec_of(name: str, kind: Any) -> ColumnSpec:
    """The column type an Iceberg type holds here (a string: string, or json as its text)."""
    # heavy, optional (extra "pipeline")
    from pyiceberg import types as it  # noqa: PLC0415

    if isinstance(kind, it.DecimalType):
        return ColumnSpec(name, "decimal", kind.precision, kind.scale)
    plain: dict[type[Any], ColumnType] = {
        it.LongType: "integer", it.DoubleType: "number", it.BooleanType: "boolean",
        it.TimestamptzType: "timestamp", it.DateType: "date", it.BinaryType: "bytes",
    }
    return ColumnSpec(name, plain.get(type(kind), "string"))


def _check_json(layout: TableLayout, changes: Sequence[Change], prefix: str) -> None:
    """Refuse a change set with a json value that is not JSON text, as the databases do."""
    for change in changes:
        for c in layout.columns:
            name, value = c.name, change.values.get(c.name)
            if c.type == "json" and value is not None:
                try:
                    json.loads(value)
                except (TypeError, ValueError):
                    raise DestinationError(
                        f"{prefix}: row {change.row_id!r}: {name} is not JSON"
                    ) from None


def _apply(
    layout: TableLayout,
    rows: dict[str, dict[str, Any]],
    changes: Sequence[Change],
    now: datetime,
) -> None:
    """Apply ``changes`` to ``rows`` (by row id) in place, as the SQL upsert and delete do:
    a live change writes every column and clears ``deleted_at``, keeping ``props``; a delete
    marks the row (soft, once) or removes it (hard)."""
    for change in changes:
        old = rows.get(change.row_id)
        if change.deleted:
            if old is None:
                continue
            if layout.delete == "hard":
                del rows[change.row_id]
            elif old.get("deleted_at") is None:
                old.update(deleted_at=now, synced_at=now)
            continue
        row: dict[str, Any] = (
            dict(old) if old is not None else {"row_id": change.row_id, "props": "{}"}
        )
        row.update({n: change.values.get(n) for n in layout.column_names})
        row["synced_at"] = now
        if layout.delete == "soft":
            row["deleted_at"] = None
        rows[change.row_id] = row
