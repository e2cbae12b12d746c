"""Table schemas (docs/protocol.md §10): validation, additive evolution and delta checks."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from lakesync.delta import RowDelta, validate_identifier
from lakesync.errors import SchemaError
from lakesync.hints import explain

__all__ = [
    "RESERVED_COLUMNS",
    "ColumnSpec",
    "ColumnType",
    "TableSchema",
    "check_delta",
    "check_value",
    "evolve",
    "merge_declared",
    "parse_schema",
    "schema_to_wire",
    "widened",
]

ColumnType = Literal["string", "number", "boolean", "json", "null"]
# Names every replica and destination adds itself (docs/protocol.md §11, the lake's
# current-state tables).
RESERVED_COLUMNS = frozenset(
    {
        "row_id",
        "gateway_id",
        "props",
        "synced_at",
        "deleted_at",
        "_hlc",
        "_changed_at",
        "_ingest_hlc",
    }
)


class ColumnSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One column of a table: its name and type."""

    name: str
    type: ColumnType


class TableSchema(
    msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True, omit_defaults=True
):
    """A synced table's declared shape (unset options are left out of its JSON form)."""

    table: str
    columns: list[ColumnSpec]
    primary_key: list[str] | None = None
    soft_delete: bool = False
    external_id_column: str | None = None

    def column_types(self) -> dict[str, str]:
        """``{column name: type}`` in declaration order."""
        return {c.name: c.type for c in self.columns}


def parse_schema(obj: object) -> TableSchema:
    """Validate a table schema document; :class:`SchemaError` names the problem."""
    try:
        schema = msgspec.convert(obj, TableSchema)
    except msgspec.ValidationError as exc:
        raise SchemaError(f"invalid table schema: {explain(exc, TableSchema)}") from None
    validate_identifier(schema.table, "table name")
    seen: set[str] = set()
    for c in schema.columns:
        validate_identifier(c.name, f"column name in table {schema.table!r}")
        folded = c.name.lower()
        if folded in RESERVED_COLUMNS:
            raise SchemaError(f"column name {c.name!r} is reserved; rename the column")
        if folded in seen:
            raise SchemaError(f"column {c.name!r} appears twice in {schema.table!r}")
        seen.add(folded)
    names = {c.name for c in schema.columns}
    for extra in (*(schema.primary_key or []), schema.external_id_column):
        if extra is not None and extra != "row_id" and extra not in names:
            raise SchemaError(f"{schema.table!r} refers to unknown column {extra!r}")
    return schema


def schema_to_wire(schema: TableSchema) -> dict[str, Any]:
    """The JSON-ready form of a schema (camelCase keys, unset options omitted)."""
    return msgspec.to_builtins(schema)  # type: ignore[no-any-return]


def evolve(old: TableSchema, new: TableSchema) -> TableSchema:
    """Accept ``new`` if it only adds columns to ``old``; else raise :class:`SchemaError`."""
    if old.table != new.table:
        raise SchemaError(f"cannot evolve table {old.table!r} into {new.table!r}")
    new_types = new.column_types()
    for name, typ in old.column_types().items():
        if name not in new_types:
            raise SchemaError(
                f"column {name!r} of {old.table!r} cannot be removed (evolution is additive only)"
            )
        if new_types[name] != typ:
            raise SchemaError(
                f"column {name!r} of {old.table!r} cannot change type from {typ} to "
                f"{new_types[name]} (evolution is additive only)"
            )
    return new


def widened(stored: TableSchema, new: TableSchema) -> TableSchema:
    """``stored`` with the columns only ``new`` has appended and ``new``'s type for the ones
    both have (so :func:`evolve` still refuses a type change); ``new``'s options."""
    by_name = {c.name: c for c in new.columns}
    have = {c.name for c in stored.columns}
    columns = [by_name.get(c.name, c) for c in stored.columns]
    columns += [c for c in new.columns if c.name not in have]
    return msgspec.structs.replace(new, columns=columns)


def _options(schema: TableSchema) -> tuple[list[str] | None, bool, str | None]:
    return schema.primary_key, schema.soft_delete, schema.external_id_column


def merge_declared(
    stored: TableSchema, declared: TableSchema, applied: TableSchema | None
) -> tuple[TableSchema, list[str]]:
    """Merge a schema declared in the config file into the stored one, losing nothing stored.

    ``applied`` is the declaration merged last time (None if never). Columns only ``declared``
    has are appended; stored columns it lacks stay (they were added through the admin API); a
    column declared with another type (or another letter case) keeps its stored form. The
    options (``primaryKey``, ``softDelete``, ``externalIdColumn``) are the declared ones when the
    declaration changed them since ``applied``, else the stored ones. Returns the merged schema
    and one message per conflict: a kept column, or stored options (set through the admin API
    since ``applied``) that the changed declaration replaces.
    """
    if stored.table != declared.table:
        raise SchemaError(f"cannot merge table {declared.table!r} into {stored.table!r}")
    by_fold = {c.name.lower(): c for c in stored.columns}
    columns = list(stored.columns)
    conflicts: list[str] = []
    for col in declared.columns:
        have = by_fold.get(col.name.lower())
        if have is None:
            columns.append(col)
        elif have != col:
            conflicts.append(
                f"column {have.name!r} of {stored.table!r} is {have.type} in the store but "
                f"declared {col.name!r} {col.type}; keeping {have.name!r} {have.type}"
            )
    options = _options(stored)
    if applied is None or _options(declared) != _options(applied):
        if options != _options(declared) and (applied is None or options != _options(applied)):
            conflicts.append(
                f"options of {stored.table!r} (primaryKey, softDelete, externalIdColumn) were "
                f"{options} in the store, now {_options(declared)} as declared"
            )
        options = _options(declared)
    merged = TableSchema(stored.table, columns, *options)
    return parse_schema(schema_to_wire(merged)), conflicts


def check_value(column: str, typ: str, value: Any) -> None:
    """Raise :class:`SchemaError` if ``value`` does not fit a ``typ`` column (null fits all)."""
    if value is None:
        return
    if typ == "json":
        try:
            msgspec.json.encode(value)
        except UnicodeEncodeError:
            raise SchemaError(
                f"column {column!r}: text must be valid Unicode (no lone surrogates)"
            ) from None
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"column {column!r} does not hold a JSON value: {exc}") from None
        return
    ok = {
        "string": isinstance(value, str),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "null": False,
    }[typ]
    if not ok:
        raise SchemaError(
            f"column {column!r} is declared {typ} but the value is {type(value).__name__}"
        )
    if typ == "string" and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SchemaError(
                f"column {column!r}: text must be valid Unicode (no lone surrogates)"
            ) from None


def check_delta(schema: TableSchema, delta: RowDelta) -> None:
    """Reject a delta naming a column the schema lacks or holding a value of the wrong type."""
    types = schema.column_types()
    for col in delta.columns:
        typ = types.get(col.column)
        if typ is None:
            raise SchemaError(
                f"table {schema.table!r} has no column {col.column!r}; "
                f"register it first (schemas evolve by adding columns)"
            )
        check_value(col.column, typ, col.value)
