"""Every statement a destination runs, built as a sqlglot AST per dialect (pure, no I/O).

Never by transpiling text: a staged upsert is on PostgreSQL ``WITH … UPDATE … FROM`` the staged
rows there plus ``INSERT … SELECT … WHERE NOT EXISTS`` the others (the watermark:
``INSERT … ON CONFLICT DO UPDATE``), MySQL ``INSERT … ON DUPLICATE KEY UPDATE`` and BigQuery
``MERGE``, each built for its dialect.
Identifiers are validated (docs/protocol.md §3 rule) before they reach a statement and always
quoted, so a hostile name is refused and a keyword (``order``) is just a name; values are always
bound parameters (``%(name)s`` for psycopg and PyMySQL, ``@name`` for BigQuery), never spliced.

Table layout (docs/protocol.md §11): ``row_id`` primary key, one typed column per schema column,
``props`` JSON default ``{}`` that sync never writes, ``synced_at``, and ``deleted_at`` with soft
delete; the schema's external id column is unique (not on BigQuery, which has no enforced keys).

Change sets are applied set-based from a *staging* table holding the change set's rows
(``row_id``, the typed columns, ``_deleted``): one upsert of the live rows, one soft or hard
delete of the deleted ones, in the caller's transaction together with the watermark upsert
(table ``lakesync_watermarks``).

Values PostgreSQL cannot hold: its ``text`` refuses the character U+0000 and its ``jsonb`` the
``\\u0000`` escape, while MySQL/MariaDB, BigQuery and the lake keep both. For a PostgreSQL
destination U+0000 becomes U+FFFD (the replacement character) in ``string`` columns and in every
string (keys and values) of ``json`` columns; nothing else changes, and other destinations get
the value as it is. One mapping, applied where the rows are produced: by
:func:`storable_value` for the driver's change sets and inside the Spark SQL of
:func:`select_change_set` for the bulk load (both use :data:`JSON_NUL_ESCAPE`). Without it one
such row would fail its table's shipment on every run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal, get_args

from sqlglot import exp
from sqlglot.dialects.bigquery import BigQuery
from sqlglot.dialects.mysql import MySQL
from sqlglot.dialects.postgres import Postgres
from sqlglot.dialects.spark import Spark

from lakesync.column_types import Dialect as SqlDialect
from lakesync.column_types import decimal_params, spark_type, sql_type
from lakesync.delta import validate_identifier
from lakesync.destination_specs import DeleteMode
from lakesync.schema import (
    STAGING_DELETED,
    STAGING_POSITION,
    STAGING_PREFIX,
    TIERING_TABLE,
    WATERMARKS_TABLE,
    ColumnSpec,
    ColumnType,
)

__all__ = [
    "DIALECTS",
    "JSON_NUL_ESCAPE",
    "MYSQL_TIMESTAMP_FORMAT",
    "NUL_REPLACEMENT",
    "TIERING",
    "WATERMARKS",
    "Columns",
    "Dialect",
    "TableLayout",
    "add_columns",
    "apply_deletes",
    "change_set_query",
    "clear_staging",
    "column_spec",
    "create_dataset",
    "create_staging",
    "create_table",
    "create_tiering",
    "create_watermarks",
    "delete_rows",
    "drop_staging",
    "insert_staging",
    "read_tiering",
    "read_watermark",
    "select_change_set",
    "select_changes",
    "select_column",
    "select_rows",
    "staged_summary",
    "staging_name",
    "storable_value",
    "truncate_staging",
    "update_value",
    "upsert_from_staging",
    "widen_columns",
    "write_tiering",
    "write_watermark",
]

Dialect = Literal["postgres", "mysql", "bigquery", "spark"]

WATERMARKS = WATERMARKS_TABLE
"""Bookkeeping table in each destination: per (gateway, table) the lake position shipped."""
TIERING = TIERING_TABLE
"""Bookkeeping table in a destination with a hot window: per (gateway, table) the last
lifecycle tiering's mark (see :func:`create_tiering`)."""
DELETED = STAGING_DELETED
"""Staging column: the row stopped being live."""
POSITION = STAGING_POSITION
"""Staging column: the row's lake position (landing ingest HLC)."""

NUL_REPLACEMENT = "\ufffd"
"""What U+0000 becomes in a PostgreSQL destination (see the module docstring)."""
JSON_NUL_ESCAPE = r"(?<!\\)((?:\\\\)*)\\u0000"
"""A ``\\u0000`` escape in JSON text, as a regular expression Python's ``re`` and Java's
``java.util.regex`` (Spark's ``regexp_replace``) read alike: the backslash that starts it is
preceded by an even number of backslashes (group 1, kept), so the text ``\\\\u0000`` (an
escaped backslash, then ``u0000``) is no match. JSON has backslashes only inside strings."""
_JSON_NUL = re.compile(JSON_NUL_ESCAPE)

# String columns that are keys need a bounded, case- and accent-sensitive type on MySQL:
# InnoDB indexes at most 3072 bytes (768 utf8mb4 characters), and its default collation would
# make "a" and "A" one row.
_MYSQL_KEY = "VARCHAR(768)"

# LakeSync's own columns (keys, names, times, positions, ``props``, the staging flag); a
# schema column's type is :func:`lakesync.column_types.sql_type` / ``spark_type``.
_TYPES: dict[str, dict[str, str]] = {
    "postgres": {
        "json": "JSONB", "boolean": "BOOLEAN", "key": "TEXT", "name": "TEXT",
        "timestamp": "TIMESTAMPTZ", "position": "DECIMAL(20, 0)",
    },
    "mysql": {
        "json": "JSON", "boolean": "TINYINT(1)", "key": _MYSQL_KEY, "name": "VARCHAR(64)",
        "timestamp": "DATETIME(6)", "position": "DECIMAL(20, 0)",
    },
    "bigquery": {
        "json": "JSON", "boolean": "BOOL", "key": "STRING", "name": "STRING",
        "timestamp": "TIMESTAMP", "position": "BIGNUMERIC",
    },
    "spark": {
        "json": "STRING", "boolean": "BOOLEAN", "key": "STRING", "name": "STRING",
        "timestamp": "TIMESTAMP", "position": "DECIMAL(20, 0)",
    },
}

_COLUMN_TYPES = frozenset(get_args(ColumnType))

MYSQL_TIMESTAMP_FORMAT = "yyyy-MM-dd HH:mm:ss.SSSSSS"
"""How a change set for MySQL/MariaDB writes a ``timestamp`` (Spark's pattern, in the session's
UTC): a ``DATETIME(6)`` has no zone, so it is given the UTC wall time as text, whatever time zone
the JVM loading the staging table runs in."""

Columns = Sequence[ColumnSpec | tuple[str, str]]
"""A table's columns: :class:`~lakesync.schema.ColumnSpec` values, or ``(name, type)`` pairs
for the types that take no options."""


def column_spec(column: ColumnSpec | tuple[str, str]) -> ColumnSpec:
    """A column as a :class:`~lakesync.schema.ColumnSpec` (a ``(name, type)`` pair becomes a
    spec of that type; a decimal's precision and scale are filled in)."""
    spec = column if isinstance(column, ColumnSpec) else ColumnSpec(column[0], column[1])  # type: ignore[arg-type]
    if spec.type == "decimal" and (spec.precision is None or spec.scale is None):
        precision, scale = decimal_params(spec)
        return ColumnSpec(spec.name, "decimal", precision, scale, spec.nullable)
    return spec


class _MySQLParams(MySQL):
    """MySQL with PyMySQL's ``%(name)s`` parameters (sqlglot's MySQL writes ``:name``)."""

    class Generator(MySQL.Generator):  # type: ignore[valid-type,misc]
        def placeholder_sql(self, expression: exp.Placeholder) -> str:
            return f"%({expression.name})s"


DIALECTS = {
    "postgres": Postgres(),
    "mysql": _MySQLParams(),
    "bigquery": BigQuery(),
    "spark": Spark(),
}
"""The sqlglot dialect each destination kind renders with."""


@dataclass(frozen=True, slots=True)
class TableLayout:
    """A destination table: its name, typed columns, delete mode and external id column.

    Construction validates every identifier, so no builder below sees a hostile name.
    ``qualifier`` is the dataset (BigQuery) or schema the table lives in, if any.
    """

    table: str
    columns: Sequence[ColumnSpec]
    """The schema's columns (given as specs or ``(name, type)`` pairs: :data:`Columns`)."""
    delete: DeleteMode = "soft"
    external_id: str | None = None
    qualifier: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        validate_identifier(self.table, "table name")
        specs = tuple(column_spec(c) for c in self.columns)
        object.__setattr__(self, "columns", specs)  # frozen: normalised once, here
        for c in specs:
            validate_identifier(c.name, f"column name of {self.table!r}")
            if c.type not in _COLUMN_TYPES:
                raise ValueError(f"column {c.name!r} has unknown type {c.type!r}")
        names = {c.name for c in specs}
        if self.external_id is not None and self.external_id not in names:
            raise ValueError(f"external id column {self.external_id!r} is not a column")
        for part in self.qualifier:
            _check_qualifier(part)

    @property
    def column_names(self) -> list[str]:
        """The schema's column names in declaration order."""
        return [c.name for c in self.columns]

    def staging(self) -> TableLayout:
        """The layout of this table's staging table (same columns, same place)."""
        return TableLayout(
            STAGING_PREFIX + self.table, self.columns, self.delete, None, self.qualifier
        )


def _check_qualifier(part: str) -> None:
    # BigQuery project ids may hold dashes; nothing else beyond the identifier alphabet.
    if not part or len(part) > 1024 or not all(c.isalnum() or c in "_-" for c in part):
        raise ValueError(f"{part!r} is not a valid dataset, schema or project name")


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _table(layout: TableLayout, name: str | None = None, alias: str | None = None) -> exp.Table:
    parts = [*layout.qualifier, name or layout.table]
    table = exp.Table(this=_ident(parts[-1]))
    if len(parts) >= 2:
        table.set("db", _ident(parts[-2]))
    if len(parts) >= 3:
        table.set("catalog", _ident(parts[-3]))
    if alias:
        table.set("alias", exp.TableAlias(this=_ident(alias)))
    return table


def _type(dialect: Dialect, kind: str) -> exp.DataType:
    return exp.DataType.build(_TYPES[dialect][kind], dialect=DIALECTS[dialect])


def _value_type(spec: ColumnSpec, dialect: Dialect) -> exp.DataType:
    """A schema column's type in ``dialect`` (one mapping: :mod:`lakesync.column_types`)."""
    text = spark_type(spec) if dialect == "spark" else sql_type(spec, dialect)
    return exp.DataType.build(text, dialect=DIALECTS[dialect])


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.column(_ident(name), table=_ident(table) if table else None)


def _param(name: str) -> exp.Placeholder:
    return exp.Placeholder(this=name)


def _sql(node: exp.Expression, dialect: Dialect) -> str:
    return node.sql(dialect=DIALECTS[dialect])


def _coldef(
    name: str, kind: exp.DataType, *constraints: exp.ColumnConstraintKind
) -> exp.ColumnDef:
    return exp.ColumnDef(
        this=_ident(name),
        kind=kind,
        constraints=[exp.ColumnConstraint(kind=c) for c in constraints],
    )


def _key_def(
    name: str, dialect: Dialect, *constraints: exp.ColumnConstraintKind, kind: str = "key"
) -> exp.ColumnDef:
    """A string key column (row_id, an external id; ``kind="name"``: an identifier)."""
    if dialect == "mysql":
        constraints = (
            exp.CharacterSetColumnConstraint(this=exp.var("utf8mb4")),
            exp.CollateColumnConstraint(this=exp.var("utf8mb4_bin")),
            *constraints,
        )
    return _coldef(name, _type(dialect, kind), *constraints)


def _value_def(layout: TableLayout, spec: ColumnSpec, dialect: Dialect) -> exp.ColumnDef:
    if spec.name == layout.external_id and dialect == "mysql" and spec.type == "string":
        return _key_def(spec.name, dialect)  # MySQL indexes only bounded strings
    return _coldef(spec.name, _value_type(spec, dialect))


def create_table(layout: TableLayout, dialect: Dialect) -> str:
    """``CREATE TABLE IF NOT EXISTS`` with the docs/protocol.md §11 layout."""
    defs: list[exp.Expression] = [_key_def("row_id", dialect, exp.NotNullColumnConstraint())]
    defs += [_value_def(layout, c, dialect) for c in layout.columns]
    props_default = (
        []
        if dialect == "bigquery"  # BigQuery's MERGE inserts props itself
        else [exp.DefaultColumnConstraint(this=_props_default(dialect))]
    )
    defs.append(
        _coldef("props", _type(dialect, "json"), exp.NotNullColumnConstraint(), *props_default)
    )
    defs.append(_coldef("synced_at", _type(dialect, "timestamp"), exp.NotNullColumnConstraint()))
    if layout.delete == "soft":
        defs.append(_coldef("deleted_at", _type(dialect, "timestamp")))
    if dialect == "bigquery":
        defs.append(
            exp.PrimaryKey(expressions=[_ident("row_id")], options=[exp.var("NOT ENFORCED")])
        )
    else:
        defs.append(exp.PrimaryKey(expressions=[_ident("row_id")]))
        if layout.external_id is not None:
            defs.append(exp.UniqueColumnConstraint(this=exp.Schema(
                expressions=[_ident(layout.external_id)]
            )))
    return _sql(_create(layout, defs), dialect)


def _props_default(dialect: Dialect) -> exp.Expression:
    empty = exp.Literal.string("{}")
    # MySQL 8 accepts a JSON column default only as an expression in parentheses.
    return exp.Paren(this=empty) if dialect == "mysql" else empty


def _create(layout: TableLayout, defs: list[exp.Expression], name: str | None = None) -> exp.Create:
    return exp.Create(
        this=exp.Schema(this=_table(layout, name), expressions=defs),
        kind="TABLE",
        exists=True,
    )


def add_columns(layout: TableLayout, existing: Sequence[str], dialect: Dialect) -> list[str]:
    """Additive evolution: one ``ALTER TABLE … ADD COLUMN`` per schema column the destination
    table lacks (``existing`` are its column names, compared case-insensitively)."""
    have = {c.lower() for c in existing}
    out = []
    for spec in layout.columns:
        if spec.name.lower() in have:
            continue
        alter = exp.Alter(
            this=_table(layout),
            kind="TABLE",
            actions=[_value_def(layout, spec, dialect)],
        )
        out.append(_sql(alter, dialect))
    return out


# What each database's catalog calls a type (PostgreSQL ``format_type``, MySQL/MariaDB
# ``COLUMN_TYPE``, BigQuery's field type with its precision and scale), in lower case without
# spaces, and the column type it holds.
_CATALOG_ALIASES = {
    "postgres": {"timestamptz": "timestampwithtimezone"},
    "mysql": {},
    "bigquery": {"int64": "integer", "float64": "float", "bool": "boolean"},
}
_CATALOG_FAMILIES = {
    "postgres": [("bigint", "integer"), ("numeric", "decimal"), ("doubleprecision", "number"),
                 ("boolean", "boolean"), ("jsonb", "json"), ("timestampwithtimezone", "timestamp"),
                 ("date", "date"), ("bytea", "bytes"), ("text", "string")],
    "mysql": [("bigint", "integer"), ("decimal", "decimal"), ("double", "number"), ("json", "json"),
              ("tinyint", "boolean"), ("datetime", "timestamp"), ("date", "date"),
              ("longblob", "bytes"), ("longtext", "string"), ("varchar", "string")],
    "bigquery": [("integer", "integer"), ("numeric", "decimal"), ("bignumeric", "decimal"),
                 ("float", "number"), ("boolean", "boolean"), ("json", "json"),
                 ("timestamp", "timestamp"), ("date", "date"), ("bytes", "bytes"),
                 ("string", "string")],
}
WIDEN_SUFFIX = "__lakesync_widened"
"""The temporary column a widening to a string fills (MySQL/MariaDB, BigQuery) before it
replaces the old one."""


def _catalog_form(text: str, dialect: Dialect) -> str:
    folded = re.sub(r"\s+", "", text.lower())
    folded = re.sub(r"^bigint\(\d+\)$", "bigint", folded)  # MySQL's display width
    return _CATALOG_ALIASES.get(dialect, {}).get(folded, folded)


def _family(found: str, dialect: Dialect) -> str:
    """The column type a catalog type holds (its longest matching prefix)."""
    matches = [(p, t) for p, t in _CATALOG_FAMILIES[dialect] if found.startswith(p)]
    return max(matches, key=lambda m: len(m[0]))[1] if matches else "string"


def _as_text(column: exp.Expression, family: str, dialect: Dialect) -> exp.Expression:
    """Dialect SQL: a value of a ``family`` column as the text a string column holds for it
    (what the lake's ``string`` decoder reads its wire value as: booleans ``true``/``false``,
    instants ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, bytes base64, decimals in plain notation)."""
    text = exp.DataType.build("TEXT" if dialect != "bigquery" else "STRING")
    if dialect == "mysql":
        text = exp.DataType.build("CHAR")
    if family == "boolean":
        return exp.If(this=column, true=exp.Literal.string("true"),
                      false=exp.Literal.string("false"))
    if family == "timestamp":
        if dialect == "postgres":
            utc = exp.AtTimeZone(this=column, zone=exp.Literal.string("UTC"))
            return exp.Anonymous(this="to_char", expressions=[
                utc, exp.Literal.string('YYYY-MM-DD"T"HH24:MI:SS.US"Z"')])
        if dialect == "mysql":
            return exp.Anonymous(this="DATE_FORMAT", expressions=[
                column, exp.Literal.string("%Y-%m-%dT%H:%i:%s.%fZ")])
        return exp.Anonymous(this="FORMAT_TIMESTAMP", expressions=[
            exp.Literal.string("%Y-%m-%dT%H:%M:%E6SZ"), column, exp.Literal.string("UTC")])
    if family == "bytes":
        if dialect == "postgres":
            encoded: exp.Expression = exp.Anonymous(
                this="encode", expressions=[column, exp.Literal.string("base64")])
        else:
            encoded = exp.ToBase64(this=column)
        if dialect == "bigquery":
            return encoded
        # PostgreSQL and MariaDB break base64 into lines of 76.
        return exp.Anonymous(this="REPLACE", expressions=[
            encoded, exp.Chr(expressions=[exp.Literal.number(10)]), exp.Literal.string("")])
    if family == "json" and dialect == "bigquery":
        text_of = exp.Anonymous(this="TO_JSON_STRING", expressions=[column])
        # TO_JSON_STRING writes an SQL null as the text null.
        return exp.If(this=exp.Is(this=column.copy(), expression=exp.Null()), true=exp.Null(),
                      false=text_of)
    return exp.Cast(this=column, to=text)


def widen_columns(
    layout: TableLayout, found: Mapping[str, str], dialect: SqlDialect
) -> list[str]:
    """Widen in place every column whose type in the table (``found``: column name, folded to
    lower case → the type as the database's catalog names it) is not the layout's, the schema
    having widened it (:func:`lakesync.column_types.widening_allowed`; nothing else reaches a
    registered schema, or ``lakesync schema migrate`` retyped a number column as an integer or
    a decimal, :func:`lakesync.schema.migrated`). Every value is kept: integer → decimal →
    number by the database's own conversion (PostgreSQL ``ALTER COLUMN … TYPE … USING``,
    MySQL/MariaDB ``MODIFY COLUMN``, BigQuery ``ALTER COLUMN … SET DATA TYPE``, or through a
    new column for a migrated number column); to a string as the text the lake reads the
    value as (:func:`_as_text`): PostgreSQL converts in place (``USING``), MySQL/MariaDB and
    BigQuery fill a new column (:data:`WIDEN_SUFFIX`) and replace the old one with it (a run
    interrupted in between is finished by the next)."""
    out: list[str] = []
    for spec in layout.columns:
        have = found.get(spec.name.lower())
        if have is None:
            continue
        kind = _value_type(spec, dialect)
        mysql_key = (dialect == "mysql" and spec.name == layout.external_id
                     and spec.type == "string")  # as _value_def makes it
        want = _catalog_form(_MYSQL_KEY if mysql_key else sql_type(spec, dialect), dialect)
        old = _catalog_form(have, dialect)
        if want == old:
            continue
        family = _family(old, dialect)
        to_text = spec.type in ("string", "null") or want.startswith("varchar")
        if dialect == "postgres":
            using = _as_text(_col(spec.name), family, dialect) if to_text else exp.Cast(
                this=_col(spec.name), to=kind.copy())
            action = exp.AlterColumn(this=_ident(spec.name), dtype=kind, using=using)
            out.append(_sql(exp.Alter(this=_table(layout), kind="TABLE", actions=[action]),
                            dialect))
        elif dialect == "bigquery" and family == "number":
            # A migrated number column (lakesync schema migrate): BigQuery only widens in place.
            cast = exp.Cast(this=_col(spec.name), to=kind.copy())
            out += _widen_through(layout, spec, cast, dialect)
        elif not to_text:
            if dialect == "mysql":  # sqlglot has no MODIFY COLUMN node: its parts are built
                definition = _sql(_value_def(layout, spec, dialect), dialect)
                out.append(f"ALTER TABLE {_sql(_table(layout), dialect)} MODIFY COLUMN "
                           + definition)
            else:
                action = exp.AlterColumn(this=_ident(spec.name), dtype=kind)
                out.append(_sql(exp.Alter(this=_table(layout), kind="TABLE",
                                          actions=[action]), dialect))
        else:
            out += _widen_through(layout, spec, _as_text(_col(spec.name), family, dialect),
                                  dialect)
    return out


def select_column(layout: TableLayout, name: str, dialect: Dialect) -> str:
    """``row_id`` and column ``name`` of every row."""
    query = exp.select(_col("row_id"), _col(name)).from_(_table(layout))
    return _sql(query, dialect)


def update_value(layout: TableLayout, name: str, dialect: Dialect) -> str:
    """Set column ``name`` of the row of parameter ``row_id`` to parameter ``value``."""
    update = exp.Update(
        this=_table(layout),
        expressions=[exp.EQ(this=_col(name), expression=_param("value"))],
        where=exp.Where(this=exp.EQ(this=_col("row_id"), expression=_param("row_id"))),
    )
    return _sql(update, dialect)


def _widen_through(
    layout: TableLayout, spec: ColumnSpec, value: exp.Expression, dialect: Dialect
) -> list[str]:
    """A column changed through a new column: add it, fill it with ``value`` (of the old
    column), drop the old column and give the new one its name."""
    temp = spec.name + WIDEN_SUFFIX
    table = _table(layout)
    add = exp.Alter(this=table.copy(), kind="TABLE", actions=[
        exp.ColumnDef(this=_ident(temp), kind=_value_type(spec, dialect),
                      exists=True)])
    fill = exp.Update(
        this=table.copy(),
        expressions=[exp.EQ(this=_col(temp), expression=value)],
        where=exp.Where(this=exp.true()),
    )
    drop = exp.Drop(tables=[_col(spec.name)], kind="COLUMN")
    rename = exp.RenameColumn(this=_col(temp), to=_col(spec.name))
    if dialect == "mysql":  # one statement: the column is never missing
        swap = [exp.Alter(this=table.copy(), kind="TABLE", actions=[drop, rename])]
    else:
        swap = [exp.Alter(this=table.copy(), kind="TABLE", actions=[a]) for a in (drop, rename)]
    return [_sql(s, dialect) for s in (add, fill, *swap)]


def drop_staging(layout: TableLayout, dialect: Dialect) -> str:
    """``DROP TABLE IF EXISTS`` of the staging table (recreated in the current shape)."""
    return _sql(exp.Drop(tables=[_table(layout.staging())], kind="TABLE", exists=True), dialect)


def create_staging(layout: TableLayout, dialect: Dialect) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the staging table a change set is loaded into.

    JSON cells arrive as text (their canonical JSON) and are cast by the upsert (so do bytes on
    BigQuery, as base64); ``_position``
    is each row's lake position when a bulk loader fills it (see :func:`staged_summary`).
    """
    staging = layout.staging()
    defs: list[exp.Expression] = [_key_def("row_id", dialect, exp.NotNullColumnConstraint())]
    defs += [_coldef(c.name, _value_type(_staged_spec(c, dialect), dialect))
             for c in layout.columns]
    defs.append(_coldef(DELETED, _type(dialect, "boolean")))
    defs.append(_coldef(POSITION, _type(dialect, "position")))
    if dialect == "mysql":
        # The deletes look rows up by row_id: without a key MariaDB rescans it per target row.
        # PostgreSQL hashes the staged ids instead, so its staging table keeps no index to
        # maintain while loading (a change set holds each row once; a row staged twice by a
        # retried load carries the same state twice).
        defs.append(exp.PrimaryKey(expressions=[_ident("row_id")]))
    create = _create(staging, defs)
    if dialect == "postgres":
        # Staging is refilled every run: PostgreSQL need not write its rows to the WAL (a
        # crash empties an unlogged table, which the next run refills anyway).
        create.set("properties", exp.Properties(expressions=[exp.UnloggedProperty()]))
    return _sql(create, dialect)


def _staged_spec(spec: ColumnSpec, dialect: Dialect) -> ColumnSpec:
    """How the staging table holds a column: json as its text; on BigQuery bytes as base64
    text too (what a JSON load job carries; the upsert decodes it, :func:`_staged_value`)."""
    if spec.type == "json" or (spec.type == "bytes" and dialect == "bigquery"):
        return ColumnSpec(spec.name, "string")
    return spec


def insert_staging(layout: TableLayout, dialect: Dialect) -> str:
    """Insert one staged row from parameters ``c0`` (row_id), ``c1``… (the columns in order) and
    ``deleted``: the loader without Spark (executemany)."""
    names = ["row_id", *layout.column_names, DELETED]
    params = [_param(f"c{i}") for i in range(len(names) - 1)] + [_param("deleted")]
    insert = exp.Insert(
        this=exp.Schema(this=_table(layout.staging()), expressions=[_ident(n) for n in names]),
        expression=exp.Values(expressions=[exp.Tuple(expressions=params)]),
    )
    return _sql(insert, dialect)


def storable_value(kind: ColumnSpec | str, value: Any, dialect: Dialect) -> Any:
    """``value`` of a column (json as JSON text; ``kind`` its spec, or its type when that takes
    no options) as a ``dialect`` destination can store it: for PostgreSQL, U+0000 in a string,
    or a ``\\u0000`` escape in JSON text, becomes U+FFFD; for MySQL/MariaDB a timestamp is
    its naive UTC time (``DATETIME`` has no zone) and a decimal of a scale its ``DECIMAL``
    cannot hold is its text; other kinds and values are returned as they are."""
    spec = column_spec(("value", kind) if isinstance(kind, str) else kind)
    if value is None:
        return None
    if dialect == "mysql":
        if spec.type == "timestamp" and isinstance(value, datetime):
            return value.astimezone(UTC).replace(tzinfo=None)
        if spec.type == "decimal" and isinstance(value, Decimal) and _mysql_text(spec):
            return format(value, "f")
        return value
    if dialect != "postgres" or not isinstance(value, str):
        return value
    if spec.type == "string":
        return value.replace("\x00", NUL_REPLACEMENT)
    if spec.type == "json":
        return _JSON_NUL.sub(r"\g<1>" + NUL_REPLACEMENT, value)
    return value


def _mysql_text(spec: ColumnSpec) -> bool:
    """MySQL/MariaDB keeps this decimal as text (``sql_type`` maps its scale to VARCHAR)."""
    return not sql_type(spec, "mysql").startswith("DECIMAL")


def _stored_as_text(spec: ColumnSpec, dialect: Dialect | None) -> bool:
    """Whether a change set for ``dialect`` holds ``spec``'s values as text (see
    :func:`_storable_column`)."""
    if spec.type == "timestamp":
        return dialect == "mysql"
    if spec.type == "decimal":
        return dialect == "bigquery" or (dialect == "mysql" and _mysql_text(spec))
    return False


def _storable_column(
    spec: ColumnSpec, column: exp.Expression, dialect: Dialect | None
) -> exp.Expression:
    """Spark SQL: ``column`` (a value of ``spec``'s column) as :func:`storable_value` gives it
    for a ``dialect`` destination's loader, named as the column: for PostgreSQL U+0000 mapped;
    for MySQL/MariaDB a timestamp as its UTC wall time text (:data:`MYSQL_TIMESTAMP_FORMAT`) and
    a decimal it keeps as text as its plain text; for BigQuery's JSON load a decimal as text (a
    JSON number would be read as a double)."""
    mapped: exp.Expression = column
    if _stored_as_text(spec, dialect):
        if spec.type == "timestamp":
            mapped = exp.Anonymous(this="date_format", expressions=[
                column, exp.Literal.string(MYSQL_TIMESTAMP_FORMAT)
            ])
        else:  # a decimal: Spark writes its text in plain notation
            mapped = exp.Cast(this=column, to=exp.DataType.build("STRING"))
    elif dialect == "postgres" and spec.type == "string":
        mapped = exp.Replace(
            this=column, expression=exp.Chr(expressions=[exp.Literal.number(0)]),
            replacement=exp.Literal.string(NUL_REPLACEMENT),
        )
    elif dialect == "postgres" and spec.type == "json":
        mapped = exp.RegexpReplace(
            this=column, expression=exp.Literal.string(JSON_NUL_ESCAPE),
            replacement=exp.Literal.string("$1" + NUL_REPLACEMENT),
        )
    if mapped is column:
        return column
    return exp.Alias(this=mapped, alias=_ident(spec.name))


def staged_summary(layout: TableLayout, dialect: Dialect) -> str:
    """How many rows the staging table holds and their greatest ``_position``."""
    query = exp.select(
        exp.Count(this=exp.Star()), exp.Max(this=_col(POSITION))
    ).from_(_table(layout.staging()))
    return _sql(query, dialect)


def clear_staging(layout: TableLayout, dialect: Dialect) -> str:
    """Empty the staging table (a DELETE, so it can run inside a transaction)."""
    delete = exp.Delete(this=_table(layout.staging()))
    if dialect == "bigquery":  # BigQuery refuses a DELETE without WHERE
        delete.set("where", exp.Where(this=exp.true()))
    return _sql(delete, dialect)


def truncate_staging(layout: TableLayout, dialect: Dialect) -> str:
    """``TRUNCATE TABLE`` of the staging table: empties it in constant time, unlike a DELETE of
    every row, but MySQL commits the open transaction first, so run it in one of its own."""
    return _sql(exp.TruncateTable(expressions=[_table(layout.staging())]), dialect)


def _staged_value(spec: ColumnSpec, dialect: Dialect) -> exp.Expression:
    col = _col(spec.name, "s")
    if spec.type == "bytes" and dialect == "bigquery":
        return exp.FromBase64(this=col)
    if spec.type != "json":
        return col
    if dialect == "bigquery":
        return exp.ParseJSON(this=col)
    if dialect == "postgres":
        return exp.Cast(this=col, to=_type(dialect, "json"))
    return col  # MySQL/MariaDB JSON is text checked by JSON_VALID


def upsert_from_staging(layout: TableLayout, dialect: Dialect) -> str:
    """Insert or update every live staged row; ``props`` is never written, ``deleted_at`` is
    cleared (a revived row). Parameter ``now``: the sync time."""
    if dialect == "bigquery":
        return _merge_from_staging(layout)
    names = ["row_id", *layout.column_names, "synced_at"]
    values: list[exp.Expression] = [_col("row_id", "s")]
    values += [_staged_value(c, dialect) for c in layout.columns]
    values.append(_param("now"))
    if layout.delete == "soft":
        names.append("deleted_at")
        values.append(exp.Null())
    live = exp.Not(this=_col(DELETED, "s"))
    select = exp.select(*values).from_(_table(layout.staging(), alias="s")).where(live)
    updated = [n for n in names if n != "row_id"]
    insert = exp.Insert(
        this=exp.Schema(this=_table(layout), expressions=[_ident(n) for n in names]),
        expression=select,
    )
    if dialect == "postgres":
        # An UPDATE of the rows there and an INSERT of the others (both read the snapshot before
        # the statement): half the work of ON CONFLICT's speculative insertion per new row.
        key = exp.EQ(this=_col("row_id", "t"), expression=_col("row_id", "s"))
        update = exp.Update(
            this=_table(layout, alias="t"),
            expressions=[
                exp.EQ(this=_col(n), expression=v)
                for n, v in zip(names, values, strict=True) if n != "row_id"
            ],
            from_=exp.From(this=_table(layout.staging(), alias="s")),
            where=exp.Where(this=exp.and_(key, live.copy())),
        )
        there = exp.select(exp.Literal.number(1)).from_(_table(layout, alias="t")).where(key.copy())
        select.where(exp.Not(this=exp.Exists(this=there)), copy=False)
        insert.set("with_", exp.With(expressions=[
            exp.CTE(this=update, alias=exp.TableAlias(this=_ident("updated")))
        ]))
        return _sql(insert, dialect)
    sets = [
        exp.EQ(this=_col(n), expression=exp.Anonymous(this="VALUES", expressions=[_col(n)]))
        for n in updated
    ]
    insert.set("conflict", exp.OnConflict(
        duplicate=True, action=exp.var("UPDATE"), expressions=sets
    ))
    return _sql(insert, dialect)


def _merge_from_staging(layout: TableLayout) -> str:
    target, source = "t", "s"
    updated = [*layout.column_names, "synced_at"]
    values = {c.name: _staged_value(c, "bigquery") for c in layout.columns}
    values["synced_at"] = _param("now")
    sets = [exp.EQ(this=_col(n), expression=values[n]) for n in updated]
    insert_cols = ["row_id", *updated, "props"]
    insert_vals = [_col("row_id", source), *(values[n] for n in updated)]
    insert_vals.append(exp.ParseJSON(this=exp.Literal.string("{}"), is_literal=True))
    if layout.delete == "soft":
        no_time = exp.Cast(this=exp.Null(), to=_type("bigquery", "timestamp"))
        sets.append(exp.EQ(this=_col("deleted_at"), expression=no_time))
    live = exp.Not(this=_col(DELETED, source))
    merge = exp.Merge(
        this=_table(layout, alias=target),
        using=_table(layout.staging(), alias=source),
        on=exp.EQ(this=_col("row_id", target), expression=_col("row_id", source)),
        whens=exp.Whens(expressions=[
            exp.When(matched=True, condition=live, then=exp.Update(expressions=sets)),
            exp.When(
                matched=False,
                condition=live,
                then=exp.Insert(
                    this=exp.Tuple(expressions=[_col(n) for n in insert_cols]),
                    expression=exp.Tuple(expressions=insert_vals),
                ),
            ),
        ]),
    )
    return _sql(merge, "bigquery")


def apply_deletes(layout: TableLayout, dialect: Dialect) -> str:
    """Apply the staged deletes: soft sets ``deleted_at`` (and ``synced_at``) to parameter
    ``now`` on rows not already deleted; hard removes the rows."""
    deleted_ids = (
        exp.select(_col("row_id", "s"))
        .from_(_table(layout.staging(), alias="s"))
        .where(_col(DELETED, "s"))
    )
    in_staged = exp.In(this=_col("row_id"), query=exp.Subquery(this=deleted_ids))
    if layout.delete == "hard":
        return _sql(exp.Delete(this=_table(layout), where=exp.Where(this=in_staged)), dialect)
    update = exp.Update(
        this=_table(layout),
        expressions=[
            exp.EQ(this=_col("deleted_at"), expression=_param("now")),
            exp.EQ(this=_col("synced_at"), expression=_param("now")),
        ],
        where=exp.Where(this=exp.and_(
            in_staged, exp.Is(this=_col("deleted_at"), expression=exp.Null())
        )),
    )
    return _sql(update, dialect)


def select_rows(layout: TableLayout, dialect: Dialect) -> str:
    """Every row of the destination table with all its columns, ordered by ``row_id``."""
    names = ["row_id", *layout.column_names, "props", "synced_at"]
    if layout.delete == "soft":
        names.append("deleted_at")
    query = exp.select(*(_col(n) for n in names)).from_(_table(layout)).order_by(_col("row_id"))
    return _sql(query, dialect)


def select_changes(layout: TableLayout, dialect: Dialect, limited: bool = False) -> str:
    """Rows synced after parameter ``since`` (a timestamp), oldest first: what changed in the
    destination since a watermark (soft-deleted rows included, with ``deleted_at`` set).

    ``limited``: only the rows up to and including the instant (``synced_at``) of the
    ``limit``-th such row (parameter ``limit``), so a page of changes never ends inside one
    instant (rows of one change set share it)."""
    names = ["row_id", *layout.column_names, "props", "synced_at"]
    if layout.delete == "soft":
        names.append("deleted_at")
    after = exp.GT(this=_col("synced_at"), expression=_param("since"))
    where: list[exp.Expression] = [after]
    if limited:
        first = (
            exp.select(_col("synced_at"))
            .from_(_table(layout))
            .where(after.copy())
            .order_by(_col("synced_at"))
            .limit(_param("limit"))
        )
        cut = exp.select(exp.Max(this=_col("synced_at", "f"))).from_(
            exp.Subquery(this=first, alias=exp.TableAlias(this=_ident("f")))
        )
        where.append(exp.LTE(this=_col("synced_at"), expression=exp.Subquery(this=cut)))
    query = (
        exp.select(*(_col(n) for n in names))
        .from_(_table(layout))
        .where(*where)
        .order_by(_col("synced_at"), _col("row_id"))
    )
    return _sql(query, dialect)


def delete_rows(layout: TableLayout, dialect: Dialect, count: int) -> str:
    """Remove the rows whose ``row_id`` is one of parameters ``r0`` … ``r{count-1}``: lifecycle
    tiering takes rows out of a hot destination once the lake (the cold tier) alone keeps them
    (it picks them by their last change, :mod:`lakesync.lakehouse.lifecycle`)."""
    if count < 1:
        raise ValueError("delete_rows needs at least one row id")
    ids = exp.In(this=_col("row_id"), expressions=[_param(f"r{i}") for i in range(count)])
    return _sql(exp.Delete(this=_table(layout), where=exp.Where(this=ids)), dialect)


def create_dataset(project: str, dataset: str) -> str:
    """BigQuery ``CREATE SCHEMA IF NOT EXISTS project.dataset``."""
    _check_qualifier(project)
    _check_qualifier(dataset)
    schema = exp.Table(this=_ident(dataset), db=_ident(project))
    return _sql(exp.Create(this=schema, kind="SCHEMA", exists=True), "bigquery")


def staging_name(layout: TableLayout, dialect: Dialect) -> str:
    """The staging table's quoted, qualified name (for a bulk loader such as Spark's JDBC
    writer, which takes a table name as text)."""
    return _sql(_table(layout.staging()), dialect)


def select_change_set(
    table: str,
    columns: Columns,
    rows: Sequence[str] = ("lakesync", "int_rows_merged"),
    current: Sequence[str] = ("analytics",),
    destination: Dialect | None = None,
) -> str:
    """Spark SQL: a table's change set since a watermark, from the lake's models.

    The live rows of gateway ``:gateway_id`` in the current-state table ``current.table`` whose
    landing position (``_ingest_hlc``) passed ``:since``, with their typed columns, and the rows
    of ``rows`` (``int_rows_merged``: per row its liveness and landing position) of that gateway
    and table ``:table_name`` that stopped being live since, with ``_deleted`` true and null
    columns. ``_position`` is the row's landing position (ingest HLC). Both tables are one dbt
    build's, so a row is in exactly one branch; the two scans need no join (each reads only its
    files past the position) and run as parallel tasks. With ``destination``, the values are
    those :func:`storable_value` gives for that dialect (the executors map them). The generated
    change-set dbt models (:func:`lakesync.lakehouse.models.render_change_set_model`) are the same
    query (:func:`change_set_query`) with ``ref()`` calls and the destination's watermark in place
    of the parameters.
    """
    for part in (*rows, *current):
        validate_identifier(part, "lake namespace or table")
    named = [*current, table]
    query = change_set_query(
        table,
        columns,
        rows=exp.Table(this=_ident(rows[-1]), db=_ident(rows[0]) if len(rows) > 1 else None),
        current=exp.Table(this=_ident(named[-1]), db=_ident(named[-2])),
        gateway_id=_param("gateway_id"),
        table_name=_param("table_name"),
        since=_param("since"),
        destination=destination,
    )
    return _sql(query, "spark")


def change_set_query(
    table: str,
    columns: Columns,
    *,
    rows: exp.Table,
    current: exp.Table,
    gateway_id: exp.Expression,
    table_name: exp.Expression,
    since: exp.Expression,
    deleted: str = DELETED,
    destination: Dialect | None = None,
) -> exp.Expression:
    """The change-set query's AST (Spark): ``row_id``, the typed columns, ``deleted`` (the row
    stopped being live) and ``_position``, from the current-state table ``current`` and the
    merged rows ``rows``, for the gateway, table name and watermark expressions given (bound
    parameters, or a dbt model's literals and Jinja), with the values a ``destination`` dialect
    can store (:func:`storable_value`). See :func:`select_change_set`."""
    layout = TableLayout(table, [column_spec(c) for c in columns], "hard", None, ())
    validate_identifier(deleted, "change-set column")
    a = current.copy()
    a.set("alias", exp.TableAlias(this=_ident("a")))
    r = rows.copy()
    r.set("alias", exp.TableAlias(this=_ident("r")))
    live = (
        exp.select(
            _col("row_id", "a"),
            *(_storable_column(c, _col(c.name, "a"), destination) for c in layout.columns),
            exp.alias_(exp.false(), deleted, quoted=True),
            exp.alias_(_col("_ingest_hlc", "a"), POSITION, quoted=True),
        )
        .from_(a)
        .where(exp.and_(
            exp.EQ(this=_col("gateway_id", "a"), expression=gateway_id.copy()),
            exp.GT(this=_col("_ingest_hlc", "a"), expression=since.copy()),
        ))
    )
    gone = (
        exp.select(
            _col("row_id", "r"),
            *(
                exp.Cast(this=exp.Null(), to=exp.DataType.build("STRING")
                         if _stored_as_text(c, destination) else _value_type(c, "spark"))
                for c in layout.columns
            ),
            exp.true(),
            _col("last_ingest_hlc", "r"),
        )
        .from_(r)
        .where(exp.and_(
            exp.EQ(this=_col("gateway_id", "r"), expression=gateway_id.copy()),
            exp.EQ(this=_col("table_name", "r"), expression=table_name.copy()),
            exp.GT(this=_col("last_ingest_hlc", "r"), expression=since.copy()),
            exp.Not(this=_col("is_live", "r")),
        ))
    )
    return exp.union(live, gone, distinct=False)


def _bookkeeping(name: str, qualifier: Sequence[str]) -> TableLayout:
    return TableLayout(name, (), "hard", None, qualifier)


def _create_bookkeeping(
    name: str, values: Sequence[str], dialect: Dialect, qualifier: Sequence[str]
) -> str:
    """``CREATE TABLE IF NOT EXISTS name``: keyed by (gateway_id, table_name), a ``position``
    column per name in ``values``, and ``updated_at``."""
    defs: list[exp.Expression] = [
        _key_def("gateway_id", dialect, exp.NotNullColumnConstraint(), kind="name"),
        _key_def("table_name", dialect, exp.NotNullColumnConstraint(), kind="name"),
        *(_coldef(v, _type(dialect, "position"), exp.NotNullColumnConstraint()) for v in values),
        _coldef("updated_at", _type(dialect, "timestamp"), exp.NotNullColumnConstraint()),
    ]
    key = [_ident("gateway_id"), _ident("table_name")]
    if dialect == "bigquery":
        defs.append(exp.PrimaryKey(expressions=key, options=[exp.var("NOT ENFORCED")]))
    else:
        defs.append(exp.PrimaryKey(expressions=key))
    return _sql(_create(_bookkeeping(name, qualifier), defs), dialect)


def _read_bookkeeping(
    name: str, values: Sequence[str], dialect: Dialect, qualifier: Sequence[str]
) -> str:
    """The ``values`` of parameters ``gateway_id`` and ``table_name`` (no row: none)."""
    query = (
        exp.select(*(_col(v) for v in values))
        .from_(_table(_bookkeeping(name, qualifier)))
        .where(exp.and_(
            exp.EQ(this=_col("gateway_id"), expression=_param("gateway_id")),
            exp.EQ(this=_col("table_name"), expression=_param("table_name")),
        ))
    )
    return _sql(query, dialect)


def _write_bookkeeping(
    name: str, values: Sequence[str], dialect: Dialect, qualifier: Sequence[str]
) -> str:
    """Upsert the row of parameters ``gateway_id`` and ``table_name`` with parameters named as
    ``values`` and ``now`` (its ``updated_at``)."""
    layout = _bookkeeping(name, qualifier)
    names = ["gateway_id", "table_name", *values, "updated_at"]
    params = {n: n for n in names} | {"updated_at": "now"}
    updated = [*values, "updated_at"]
    if dialect == "bigquery":
        src = exp.select(*(exp.alias_(_param(params[n]), n, quoted=True) for n in names))
        merge = exp.Merge(
            this=_table(layout, alias="t"),
            using=exp.Subquery(this=src, alias=exp.TableAlias(this=_ident("s"))),
            on=exp.and_(
                exp.EQ(this=_col("gateway_id", "t"), expression=_col("gateway_id", "s")),
                exp.EQ(this=_col("table_name", "t"), expression=_col("table_name", "s")),
            ),
            whens=exp.Whens(expressions=[
                exp.When(matched=True, then=exp.Update(expressions=[
                    exp.EQ(this=_col(n), expression=_col(n, "s")) for n in updated
                ])),
                exp.When(matched=False, then=exp.Insert(
                    this=exp.Tuple(expressions=[_col(n) for n in names]),
                    expression=exp.Tuple(expressions=[_col(n, "s") for n in names]),
                )),
            ]),
        )
        return _sql(merge, dialect)
    values_row = exp.Values(
        expressions=[exp.Tuple(expressions=[_param(params[n]) for n in names])]
    )
    if dialect == "postgres":
        conflict = exp.OnConflict(
            conflict_keys=[_ident("gateway_id"), _ident("table_name")],
            action=exp.var("DO UPDATE"),
            expressions=[exp.EQ(this=_col(n), expression=_col(n, "excluded")) for n in updated],
        )
    else:
        conflict = exp.OnConflict(duplicate=True, action=exp.var("UPDATE"), expressions=[
            exp.EQ(this=_col(n), expression=exp.Anonymous(this="VALUES", expressions=[_col(n)]))
            for n in updated
        ])
    insert = exp.Insert(
        this=exp.Schema(this=_table(layout), expressions=[_ident(n) for n in names]),
        expression=values_row,
        conflict=conflict,
    )
    return _sql(insert, dialect)


_WATERMARK_VALUES = ("position",)
_TIERING_VALUES = ("cutoff", "position")


def create_watermarks(dialect: Dialect, qualifier: Sequence[str] = ()) -> str:
    """``CREATE TABLE IF NOT EXISTS lakesync_watermarks``: per (gateway_id, table_name) the
    lake position (ingest HLC) shipped, and when."""
    return _create_bookkeeping(WATERMARKS, _WATERMARK_VALUES, dialect, qualifier)


def read_watermark(dialect: Dialect, qualifier: Sequence[str] = ()) -> str:
    """The position shipped for parameters ``gateway_id`` and ``table_name`` (no row: none)."""
    return _read_bookkeeping(WATERMARKS, _WATERMARK_VALUES, dialect, qualifier)


def write_watermark(dialect: Dialect, qualifier: Sequence[str] = ()) -> str:
    """Upsert the watermark row from parameters ``gateway_id``, ``table_name``, ``position`` and
    ``now``."""
    return _write_bookkeeping(WATERMARKS, _WATERMARK_VALUES, dialect, qualifier)


def create_tiering(dialect: Dialect, qualifier: Sequence[str] = ()) -> str:
    """``CREATE TABLE IF NOT EXISTS lakesync_tiering``: per (gateway_id, table_name) the last
    lifecycle tiering's mark: every row whose last change is before the HLC ``cutoff`` and whose
    lake position is at most ``position`` was evicted."""
    return _create_bookkeeping(TIERING, _TIERING_VALUES, dialect, qualifier)


def read_tiering(dialect: Dialect, qualifier: Sequence[str] = ()) -> str:
    """The tiering mark (``cutoff``, ``position``) of parameters ``gateway_id`` and
    ``table_name`` (no row: none)."""
    return _read_bookkeeping(TIERING, _TIERING_VALUES, dialect, qualifier)


def write_tiering(dialect: Dialect, qualifier: Sequence[str] = ()) -> str:
    """Upsert the tiering mark from parameters ``gateway_id``, ``table_name``, ``cutoff``,
    ``position`` and ``now``."""
    return _write_bookkeeping(TIERING, _TIERING_VALUES, dialect, qualifier)
