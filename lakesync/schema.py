"""Table schemas (docs/protocol.md §10): validation, additive evolution and delta checks."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import msgspec

from lakesync.column_types import (
    check_spec,
    check_wire_value,
    decimal_params,
    type_text,
    widening_allowed,
)
from lakesync.delta import RowDelta, validate_identifier
from lakesync.errors import SchemaError, ValueTypeError
from lakesync.hints import explain
from lakesync.values import MAX_SAFE_MAGNITUDE

__all__ = [
    "ANALYTICS_NAMESPACE",
    "CHANGES_NAMESPACE",
    "DELETED_COLUMN",
    "LANDING_NAMESPACE",
    "MAX_TABLE_NAME_LENGTH",
    "MIGRATABLE",
    "RESERVED_COLUMNS",
    "RESERVED_COLUMN_PREFIX",
    "RESERVED_COLUMN_REASONS",
    "RESERVED_NAMESPACES",
    "RESERVED_TABLE_PREFIX",
    "STAGING_DELETED",
    "STAGING_POSITION",
    "STAGING_PREFIX",
    "TIERING_TABLE",
    "WATERMARKS_TABLE",
    "ColumnSpec",
    "ColumnType",
    "TableSchema",
    "check_delta",
    "check_value",
    "evolve",
    "merge_declared",
    "migrated",
    "migration_refusal",
    "parse_schema",
    "reserved_name_problems",
    "schema_to_wire",
    "widened",
]

ColumnType = Literal[
    "string", "number", "boolean", "json", "null",  # the original five
    "integer", "decimal", "timestamp", "date", "bytes",
]

# Reserved names: every name LakeSync uses for itself, in one place. A schema naming one is
# refused at registration (admin route, lakesync.yaml, connectors); one registered before a name
# was reserved loads, and the pipeline and shipping fail that table alone, naming the problem
# (:func:`reserved_name_problems`). Names fold case: Spark, MySQL and the lake compare them so.
_ICEBERG = "an Iceberg metadata column (Spark reads it instead of the table's column)"
RESERVED_COLUMN_REASONS: Mapping[str, str] = MappingProxyType({
    "row_id": "every replica and destination keys rows by it (docs/protocol.md §11)",
    "gateway_id": "the lake's tables keep each row's gateway in it",
    "props": "destinations keep their own JSON column of that name (docs/protocol.md §11)",
    "synced_at": "destinations record when a row was shipped in it (docs/protocol.md §11)",
    "deleted_at": "destinations with soft delete mark deleted rows in it (docs/protocol.md §11)",
    "_hlc": "the lake's current-state tables keep each row's last-change clock in it",
    "_changed_at": "the lake's current-state tables keep each row's last-change time in it",
    "_ingest_hlc": "the lake's current-state tables keep each row's landing position in it",
    "_deleted": f"{_ICEBERG}, and the destinations' staging flag of a deleted row",
    "_position": "the destinations' staging tables keep each row's lake position in it",
    "_lakesync_deleted": "the change sets flag deleted rows with it",
    "_file": _ICEBERG,
    "_pos": _ICEBERG,
    "_spec_id": _ICEBERG,
    "_partition": _ICEBERG,
    "_row_id": _ICEBERG,
    "_last_updated_sequence_number": _ICEBERG,
    "_change_type": _ICEBERG,
    "_change_ordinal": _ICEBERG,
    "_commit_snapshot_id": _ICEBERG,
})
"""Column names a table cannot have, each with why."""
RESERVED_COLUMNS = frozenset(RESERVED_COLUMN_REASONS)
RESERVED_COLUMN_PREFIX = "_lakesync_"
"""Columns starting so are kept for LakeSync's own (future) columns."""
DELETED_COLUMN = "_lakesync_deleted"
"""A change set's flag column: the row stopped being live."""
STAGING_DELETED = "_deleted"
"""A destination staging table's flag column: the row stopped being live."""
STAGING_POSITION = "_position"
"""A destination staging table's column: the row's lake position (landing ingest HLC)."""

RESERVED_TABLE_PREFIX = "lakesync_"
"""Table names starting so belong to LakeSync: each destination keeps its staging tables
(:data:`STAGING_PREFIX`) and bookkeeping tables (:data:`WATERMARKS_TABLE`,
:data:`TIERING_TABLE`) next to the shipped tables, so a user table of such a name would be
overwritten."""
STAGING_PREFIX = RESERVED_TABLE_PREFIX + "stage_"
"""A destination's staging table of table ``t`` is ``lakesync_stage_t``."""
WATERMARKS_TABLE = RESERVED_TABLE_PREFIX + "watermarks"
"""Each destination's table of the lake position shipped per gateway and table."""
TIERING_TABLE = RESERVED_TABLE_PREFIX + "tiering"
"""A tiered destination's table of the last lifecycle tiering per gateway and table."""
MAX_TABLE_NAME_LENGTH = 63 - len(STAGING_PREFIX)
"""The longest table name: its staging table's name must fit the 63 characters PostgreSQL keeps
of a name (it cuts longer ones, so two could meet)."""

LANDING_NAMESPACE = "lakesync"
"""The lake's namespace of the landing table, the registry and the intermediate models."""
ANALYTICS_NAMESPACE = "analytics"
"""The lake's namespace of the current-state tables (``analytics.<table>``)."""
CHANGES_NAMESPACE = "lakesync_changes"
"""The lake's namespace of the destinations' change sets."""
RESERVED_NAMESPACES = frozenset({LANDING_NAMESPACE, ANALYTICS_NAMESPACE, CHANGES_NAMESPACE})
"""The lake's own namespaces: a ``kind: lake`` destination ships into another."""


def reserved_name_problems(schema: TableSchema) -> list[str]:
    """Why ``schema`` cannot be built or shipped: one message per reserved name it uses (its
    table name, its columns), naming the name and why; empty when it uses none."""
    problems: list[str] = []
    if schema.table.lower().startswith(RESERVED_TABLE_PREFIX):
        problems.append(
            f"table name {schema.table!r} is reserved: names starting with "
            f"{RESERVED_TABLE_PREFIX!r} belong to LakeSync (each destination keeps its staging "
            "and bookkeeping tables under them); rename the table"
        )
    if len(schema.table) > MAX_TABLE_NAME_LENGTH:
        problems.append(
            f"table name {schema.table!r} is too long: at most {MAX_TABLE_NAME_LENGTH} "
            f"characters, so that its destinations' staging table {STAGING_PREFIX}<table> fits "
            "PostgreSQL's 63; rename the table"
        )
    for c in schema.columns:
        folded = c.name.lower()
        why = RESERVED_COLUMN_REASONS.get(folded)
        if why is None and folded.startswith(RESERVED_COLUMN_PREFIX):
            why = f"names starting with {RESERVED_COLUMN_PREFIX!r} belong to LakeSync"
        if why is not None:
            problems.append(
                f"column name {c.name!r} of table {schema.table!r} is reserved: {why}; "
                "rename the column"
            )
    return problems


class ColumnSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One column of a table: its name, type and options (lakesync.column_types).

    ``precision`` and ``scale`` belong to ``decimal`` alone (38 and 9 when unset); ``nullable``
    is true unless declared false. Unset options are left out of the JSON form, so a schema of
    the original types serialises as it always did."""

    name: str
    type: ColumnType
    precision: int | None = None
    scale: int | None = None
    nullable: bool = True


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

    def column_specs(self) -> dict[str, ColumnSpec]:
        """``{column name: its spec}`` in declaration order."""
        return {c.name: c for c in self.columns}


def parse_schema(obj: object, *, stored: bool = False) -> TableSchema:
    """Validate a table schema document; :class:`SchemaError` names the problem.

    A reserved name (:func:`reserved_name_problems`) is refused too, unless ``stored``: a
    schema read back from a store or the lake's registry was registered before, perhaps before
    the name was reserved, and must load (the pipeline then fails that table alone)."""
    try:
        schema = msgspec.convert(obj, TableSchema)
    except msgspec.ValidationError as exc:
        raise SchemaError(f"invalid table schema: {explain(exc, TableSchema)}") from None
    validate_identifier(schema.table, "table name")
    seen: set[str] = set()
    for c in schema.columns:
        validate_identifier(c.name, f"column name in table {schema.table!r}")
        check_spec(c)
        folded = c.name.lower()
        if folded in seen:
            raise SchemaError(f"column {c.name!r} appears twice in {schema.table!r}")
        seen.add(folded)
    if any(c.type == "decimal" and None in (c.precision, c.scale) for c in schema.columns):
        schema = msgspec.structs.replace(
            schema, columns=[_with_defaults(c) for c in schema.columns]
        )
    names = {c.name for c in schema.columns}
    for extra in (*(schema.primary_key or []), schema.external_id_column):
        if extra is not None and extra != "row_id" and extra not in names:
            raise SchemaError(f"{schema.table!r} refers to unknown column {extra!r}")
    problems = [] if stored else reserved_name_problems(schema)
    if problems:
        raise SchemaError("; ".join(problems))
    return schema


def _with_defaults(spec: ColumnSpec) -> ColumnSpec:
    # A decimal's precision and scale are stored explicitly: the defaults could change later.
    if spec.type != "decimal":
        return spec
    precision, scale = decimal_params(spec)
    return msgspec.structs.replace(spec, precision=precision, scale=scale)


def schema_to_wire(schema: TableSchema) -> dict[str, Any]:
    """The JSON-ready form of a schema (camelCase keys, unset options omitted)."""
    return msgspec.to_builtins(schema)  # type: ignore[no-any-return]


def evolve(old: TableSchema, new: TableSchema) -> TableSchema:
    """Accept ``new`` if it only adds nullable columns to ``old`` and widens existing ones
    (:func:`lakesync.column_types.widening_allowed`); else raise :class:`SchemaError` saying
    why and what to do."""
    if old.table != new.table:
        raise SchemaError(f"cannot evolve table {old.table!r} into {new.table!r}")
    new_specs = new.column_specs()
    old_specs = old.column_specs()
    for name, spec in old_specs.items():
        if name not in new_specs:
            raise SchemaError(
                f"column {name!r} of {old.table!r} cannot be removed (evolution is additive only)"
            )
        why = widening_allowed(spec, new_specs[name])
        if why is not None:
            raise SchemaError(f"table {old.table!r}: {why}")
    for spec in new.columns:
        if spec.name not in old_specs and not spec.nullable:
            raise SchemaError(
                f"column {spec.name!r} added to {old.table!r} must be nullable: the rows already "
                "there have no value for it"
            )
    return new


def widened(stored: TableSchema, new: TableSchema) -> TableSchema:
    """``stored`` with the columns only ``new`` has appended and ``new``'s type for the ones
    both have (so :func:`evolve` still refuses a type change that is not a widening);
    ``new``'s options."""
    by_name = {c.name.lower(): c for c in new.columns}  # names fold case, as everywhere
    have = {c.name.lower() for c in stored.columns}
    columns = [by_name.get(c.name.lower(), c) for c in stored.columns]
    columns += [c for c in new.columns if c.name.lower() not in have]
    return msgspec.structs.replace(new, columns=columns)


def _options(schema: TableSchema) -> tuple[list[str] | None, bool, str | None]:
    return schema.primary_key, schema.soft_delete, schema.external_id_column


def merge_declared(
    stored: TableSchema, declared: TableSchema, applied: TableSchema | None
) -> tuple[TableSchema, list[str]]:
    """Merge a schema declared in the config file into the stored one, losing nothing stored.

    ``applied`` is the declaration merged last time (None if never). Columns only ``declared``
    has are appended (nullable: stored rows lack them); stored columns it lacks stay (they were
    added through the admin API); a column declared with a wider type
    (:func:`lakesync.column_types.widening_allowed`) takes it; one declared with another type
    (or another letter case) keeps its stored form. The
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
        if have is None and not col.nullable:
            # The stored rows have no value for it: it joins as nullable (docs/protocol.md §10).
            columns.append(msgspec.structs.replace(col, nullable=True))
            conflicts.append(
                f"column {col.name!r} of {stored.table!r} is declared not nullable but added to "
                "a table that has rows already; adding it nullable"
            )
            continue
        if have is None:
            columns.append(col)
            continue
        if have == col:
            continue
        # A declared widening of a stored column is applied (under the stored name's case).
        widening = msgspec.structs.replace(col, name=have.name)
        why = widening_allowed(have, widening)
        if why is None and have.name == col.name:
            columns[columns.index(have)] = widening
        else:
            conflicts.append(
                f"column {have.name!r} of {stored.table!r} is {_spec_text(have)} in the store "
                f"but declared {col.name!r} {_spec_text(col)}; keeping {have.name!r} "
                f"{_spec_text(have)}" + (f" ({why})" if why else "")
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
    return parse_schema(schema_to_wire(merged), stored=True), conflicts


_spec_text = type_text  # the one way messages name a column's type


def check_value(column: str, typ: str, value: Any) -> None:
    """Raise :class:`SchemaError` if ``value`` is not the canonical wire form of a value of a
    nullable ``typ`` column (null fits all); see :func:`lakesync.column_types.check_wire_value`
    for a column with options (decimal precision and scale, not nullable)."""
    check_wire_value(ColumnSpec(column, typ), value)  # type: ignore[arg-type]


def check_delta(schema: TableSchema, delta: RowDelta) -> None:
    """Reject a delta naming a column the schema lacks, holding a value that is not its
    column's type in canonical form (the message names the row, the column, the expected type
    and its canonical form), or an INSERT leaving a not-nullable column unset."""
    specs = schema.column_specs()
    for col in delta.columns:
        spec = specs.get(col.column)
        if spec is None:
            raise SchemaError(
                f"table {schema.table!r} has no column {col.column!r}; "
                f"register it first (schemas evolve by adding columns)"
            )
        try:
            check_wire_value(spec, col.value)
        except ValueTypeError as exc:
            raise ValueTypeError(
                f"row {delta.row_id!r} of {schema.table!r}: {exc.message}"
            ) from None
    if delta.op == "INSERT":
        written = {col.column for col in delta.columns}
        for spec in schema.columns:
            if not spec.nullable and spec.name not in written:
                raise ValueTypeError(
                    f"row {delta.row_id!r} of {schema.table!r}: column {spec.name!r} is not "
                    "nullable: an INSERT must set it"
                )


MIGRATABLE = ("integer", "decimal")
"""The types ``lakesync schema migrate`` gives a ``number`` column."""


def migrated(schema: TableSchema, column: str, spec: ColumnSpec) -> TableSchema:
    """``schema`` with its ``number`` column ``column`` retyped as ``spec`` (``integer`` or
    ``decimal``): the explicit migration of a column registered before typed columns existed
    (``lakesync schema migrate``), which :func:`evolve` refuses as a narrowing. Every value the
    column holds must fit the new type (:func:`migration_refusal`); a column of another type
    is refused, saying what to do."""
    found = {c.name: c for c in schema.columns}.get(column)
    if found is None:
        raise SchemaError(f"table {schema.table!r} has no column {column!r}")
    if found.type != "number":
        raise SchemaError(
            f"column {column!r} of {schema.table!r} is {_spec_text(found)}: only a number "
            "column registered before typed columns existed is migrated; widen other columns "
            "by registering the wider type, or add a new column"
        )
    if spec.type not in MIGRATABLE:
        raise SchemaError(
            f"a number column migrates to {' or '.join(MIGRATABLE)}, not {spec.type}; to make "
            "it a string, register it as string (a widening)"
        )
    new = msgspec.structs.replace(spec, name=found.name, nullable=found.nullable)
    columns = [new if c.name == column else c for c in schema.columns]
    return parse_schema(schema_to_wire(msgspec.structs.replace(schema, columns=columns)),
                        stored=True)


def migration_refusal(spec: ColumnSpec, value: Any) -> str | None:
    """Why a ``number`` column's value cannot stay once the column is ``spec`` (None: it
    fits). The value is not rewritten (a delta's id is over the values its client wrote), so
    it must already be a value of the new type as every reader takes it: an integer within
    ±2^53 (beyond, a double is no exact integer), with at most precision - scale digits for a
    decimal."""
    if value is None:
        return None
    if type(value) is not int or abs(value) > MAX_SAFE_MAGNITUDE:
        return f"{value!r} is not an integer within ±2^53"
    if spec.type == "decimal":
        precision, scale = decimal_params(spec)
        if len(str(abs(value))) > precision - scale and value != 0:
            return f"{value!r} has more than {precision - scale} integer digits"
    return None
