"""The parts every statement is built from: dialects, table layouts, and the AST helpers that
check and quote identifiers and bind values (private to :mod:`lakesync.destinations.statements`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import get_args

from sqlglot import exp
from sqlglot.dialects.bigquery import BigQuery
from sqlglot.dialects.mysql import MySQL
from sqlglot.dialects.postgres import Postgres

from lakesync.column_types import Dialect, decimal_params, sql_type
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
from lakesync.sql_ast import ident, table

WATERMARKS = WATERMARKS_TABLE
"""Bookkeeping table in each destination: per (gateway, table) the lake position shipped."""
TIERING = TIERING_TABLE
"""Bookkeeping table in a destination with a hot window: per (gateway, table) the last
lifecycle tiering's mark (see :func:`create_tiering`)."""
DELETED = STAGING_DELETED
"""Staging column: the row stopped being live."""
POSITION = STAGING_POSITION
"""Staging column: the row's lake position (landing ingest HLC)."""


# String columns that are keys need a bounded, case- and accent-sensitive type on MySQL:
# InnoDB indexes at most 3072 bytes (768 utf8mb4 characters), and its default collation would
# make "a" and "A" one row.
MYSQL_KEY = "VARCHAR(768)"

# LakeSync's own columns (keys, names, times, positions, ``props``, the staging flag); a
# schema column's type is :func:`lakesync.column_types.sql_type`.
_TYPES: dict[str, dict[str, str]] = {
    "postgres": {
        "json": "JSONB", "boolean": "BOOLEAN", "key": "TEXT", "name": "TEXT",
        "timestamp": "TIMESTAMPTZ", "position": "DECIMAL(20, 0)",
    },
    "mysql": {
        "json": "JSON", "boolean": "TINYINT(1)", "key": MYSQL_KEY, "name": "VARCHAR(64)",
        "timestamp": "DATETIME(6)", "position": "DECIMAL(20, 0)",
    },
    "bigquery": {
        "json": "JSON", "boolean": "BOOL", "key": "STRING", "name": "STRING",
        "timestamp": "TIMESTAMP", "position": "BIGNUMERIC",
    },
}

_COLUMN_TYPES = frozenset(get_args(ColumnType))


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
            check_qualifier(part)

    @property
    def column_names(self) -> list[str]:
        """The schema's column names in declaration order."""
        return [c.name for c in self.columns]

    def staging(self) -> TableLayout:
        """The layout of this table's staging table (same columns, same place)."""
        return TableLayout(
            STAGING_PREFIX + self.table, self.columns, self.delete, None, self.qualifier
        )


def check_qualifier(part: str) -> None:
    # BigQuery project ids may hold dashes; nothing else beyond the identifier alphabet.
    if not part or len(part) > 1024 or not all(c.isalnum() or c in "_-" for c in part):
        raise ValueError(f"{part!r} is not a valid dataset, schema or project name")


def table_node(layout: TableLayout, name: str | None = None, alias: str | None = None) -> exp.Table:
    return table(*layout.qualifier, name or layout.table, alias=alias)


def own_type(dialect: Dialect, kind: str) -> exp.DataType:
    return exp.DataType.build(_TYPES[dialect][kind], dialect=DIALECTS[dialect])


def value_type(spec: ColumnSpec, dialect: Dialect) -> exp.DataType:
    """A schema column's type in ``dialect`` (one mapping: :mod:`lakesync.column_types`)."""
    return exp.DataType.build(sql_type(spec, dialect), dialect=DIALECTS[dialect])


def render(node: exp.Expression, dialect: Dialect) -> str:
    return node.sql(dialect=DIALECTS[dialect])


def coldef(
    name: str, kind: exp.DataType, *constraints: exp.ColumnConstraintKind
) -> exp.ColumnDef:
    return exp.ColumnDef(
        this=ident(name),
        kind=kind,
        constraints=[exp.ColumnConstraint(kind=c) for c in constraints],
    )


def key_def(
    name: str, dialect: Dialect, *constraints: exp.ColumnConstraintKind, kind: str = "key"
) -> exp.ColumnDef:
    """A string key column (row_id, an external id; ``kind="name"``: an identifier)."""
    if dialect == "mysql":
        constraints = (
            exp.CharacterSetColumnConstraint(this=exp.var("utf8mb4")),
            exp.CollateColumnConstraint(this=exp.var("utf8mb4_bin")),
            *constraints,
        )
    return coldef(name, own_type(dialect, kind), *constraints)


def value_def(layout: TableLayout, spec: ColumnSpec, dialect: Dialect) -> exp.ColumnDef:
    if spec.name == layout.external_id and dialect == "mysql" and spec.type == "string":
        return key_def(spec.name, dialect)  # MySQL indexes only bounded strings
    return coldef(spec.name, value_type(spec, dialect))


def create_node(
    layout: TableLayout, defs: list[exp.Expression], name: str | None = None
) -> exp.Create:
    return exp.Create(
        this=exp.Schema(this=table_node(layout, name), expressions=defs),
        kind="TABLE",
        exists=True,
    )
