"""Tables and their evolution: ``CREATE TABLE`` in the docs/protocol.md §11 layout, additive
columns, and widening a column in place with every value kept."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sqlglot import exp

from lakesync.column_types import Dialect, sql_type
from lakesync.destinations.statements._build import (
    MYSQL_KEY,
    TableLayout,
    check_qualifier,
    coldef,
    create_node,
    key_def,
    own_type,
    render,
    table_node,
    value_def,
    value_type,
)
from lakesync.schema import ColumnSpec
from lakesync.sql_ast import col, ident, param


def create_table(layout: TableLayout, dialect: Dialect) -> str:
    """``CREATE TABLE IF NOT EXISTS`` with the docs/protocol.md §11 layout."""
    defs: list[exp.Expression] = [key_def("row_id", dialect, exp.NotNullColumnConstraint())]
    defs += [value_def(layout, c, dialect) for c in layout.columns]
    props_default = (
        []
        if dialect == "bigquery"  # BigQuery's MERGE inserts props itself
        else [exp.DefaultColumnConstraint(this=_props_default(dialect))]
    )
    defs.append(
        coldef("props", own_type(dialect, "json"), exp.NotNullColumnConstraint(), *props_default)
    )
    defs.append(coldef("synced_at", own_type(dialect, "timestamp"), exp.NotNullColumnConstraint()))
    if layout.delete == "soft":
        defs.append(coldef("deleted_at", own_type(dialect, "timestamp")))
    if dialect == "bigquery":
        defs.append(
            exp.PrimaryKey(expressions=[ident("row_id")], options=[exp.var("NOT ENFORCED")])
        )
    else:
        defs.append(exp.PrimaryKey(expressions=[ident("row_id")]))
        if layout.external_id is not None:
            defs.append(exp.UniqueColumnConstraint(this=exp.Schema(
                expressions=[ident(layout.external_id)]
            )))
    return render(create_node(layout, defs), dialect)


def _props_default(dialect: Dialect) -> exp.Expression:
    empty = exp.Literal.string("{}")
    # MySQL 8 accepts a JSON column default only as an expression in parentheses.
    return exp.Paren(this=empty) if dialect == "mysql" else empty


def add_columns(layout: TableLayout, existing: Sequence[str], dialect: Dialect) -> list[str]:
    """Additive evolution: one ``ALTER TABLE … ADD COLUMN`` per schema column the destination
    table lacks (``existing`` are its column names, compared case-insensitively)."""
    have = {c.lower() for c in existing}
    out = []
    for spec in layout.columns:
        if spec.name.lower() in have:
            continue
        alter = exp.Alter(
            this=table_node(layout),
            kind="TABLE",
            actions=[value_def(layout, spec, dialect)],
        )
        out.append(render(alter, dialect))
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
    layout: TableLayout, found: Mapping[str, str], dialect: Dialect
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
        kind = value_type(spec, dialect)
        mysql_key = (dialect == "mysql" and spec.name == layout.external_id
                     and spec.type == "string")  # as value_def makes it
        want = _catalog_form(MYSQL_KEY if mysql_key else sql_type(spec, dialect), dialect)
        old = _catalog_form(have, dialect)
        if want == old:
            continue
        family = _family(old, dialect)
        to_text = spec.type in ("string", "null") or want.startswith("varchar")
        if dialect == "postgres":
            using = _as_text(col(spec.name), family, dialect) if to_text else exp.Cast(
                this=col(spec.name), to=kind.copy())
            action = exp.AlterColumn(this=ident(spec.name), dtype=kind, using=using)
            out.append(render(exp.Alter(this=table_node(layout), kind="TABLE", actions=[action]),
                            dialect))
        elif dialect == "bigquery" and family == "number":
            # A migrated number column (lakesync schema migrate): BigQuery only widens in place.
            cast = exp.Cast(this=col(spec.name), to=kind.copy())
            out += _widen_through(layout, spec, cast, dialect)
        elif not to_text:
            if dialect == "mysql":  # sqlglot has no MODIFY COLUMN node: its parts are built
                definition = render(value_def(layout, spec, dialect), dialect)
                out.append(f"ALTER TABLE {render(table_node(layout), dialect)} MODIFY COLUMN "
                           + definition)
            else:
                action = exp.AlterColumn(this=ident(spec.name), dtype=kind)
                out.append(render(exp.Alter(this=table_node(layout), kind="TABLE",
                                          actions=[action]), dialect))
        else:
            out += _widen_through(layout, spec, _as_text(col(spec.name), family, dialect),
                                  dialect)
    return out


def select_column(layout: TableLayout, name: str, dialect: Dialect) -> str:
    """``row_id`` and column ``name`` of every row."""
    query = exp.select(col("row_id"), col(name)).from_(table_node(layout))
    return render(query, dialect)


def update_value(layout: TableLayout, name: str, dialect: Dialect) -> str:
    """Set column ``name`` of the row of parameter ``row_id`` to parameter ``value``."""
    update = exp.Update(
        this=table_node(layout),
        expressions=[exp.EQ(this=col(name), expression=param("value"))],
        where=exp.Where(this=exp.EQ(this=col("row_id"), expression=param("row_id"))),
    )
    return render(update, dialect)


def _widen_through(
    layout: TableLayout, spec: ColumnSpec, value: exp.Expression, dialect: Dialect
) -> list[str]:
    """A column changed through a new column: add it, fill it with ``value`` (of the old
    column), drop the old column and give the new one its name."""
    temp = spec.name + WIDEN_SUFFIX
    table = table_node(layout)
    add = exp.Alter(this=table.copy(), kind="TABLE", actions=[
        exp.ColumnDef(this=ident(temp), kind=value_type(spec, dialect),
                      exists=True)])
    fill = exp.Update(
        this=table.copy(),
        expressions=[exp.EQ(this=col(temp), expression=value)],
        where=exp.Where(this=exp.true()),
    )
    drop = exp.Drop(tables=[col(spec.name)], kind="COLUMN")
    rename = exp.RenameColumn(this=col(temp), to=col(spec.name))
    if dialect == "mysql":  # one statement: the column is never missing
        swap = [exp.Alter(this=table.copy(), kind="TABLE", actions=[drop, rename])]
    else:
        swap = [exp.Alter(this=table.copy(), kind="TABLE", actions=[a]) for a in (drop, rename)]
    return [render(s, dialect) for s in (add, fill, *swap)]


def create_dataset(project: str, dataset: str) -> str:
    """BigQuery ``CREATE SCHEMA IF NOT EXISTS project.dataset``."""
    check_qualifier(project)
    check_qualifier(dataset)
    schema = exp.Table(this=ident(dataset), db=ident(project))
    return render(exp.Create(this=schema, kind="SCHEMA", exists=True), "bigquery")
