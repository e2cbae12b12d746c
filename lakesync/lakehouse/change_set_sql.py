"""The lake's change-set query, as a sqlglot AST rendered for Spark: per destination and table,
the rows changed or gone since the destination's watermark, with the values its loader stores.

Identifiers are validated and quoted; the gateway, table and watermark are bound parameters
(:func:`select_change_set`) or, in a generated dbt model, quoted literals and the watermark's
Jinja (:func:`lakesync.lakehouse.models.render_change_set_model`). What a destination can store
is the destinations' knowledge (:func:`lakesync.destinations.statements.storable_value`); this
module maps it in Spark SQL, so the executors load values the destination takes as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from lakesync.column_types import spark_type
from lakesync.delta import validate_identifier
from lakesync.destinations.statements import (
    DELETED,
    JSON_NUL_ESCAPE,
    MYSQL_TIMESTAMP_FORMAT,
    NUL_REPLACEMENT,
    POSITION,
    Columns,
    Dialect,
    TableLayout,
    col,
    column_spec,
    ident,
    mysql_keeps_text,
    param,
)
from lakesync.schema import ColumnSpec

__all__ = ["change_set_query", "select_change_set"]


def _spark_type(spec: ColumnSpec) -> exp.DataType:
    """A schema column's type in Spark (one mapping: :mod:`lakesync.column_types`)."""
    return exp.DataType.build(spark_type(spec), dialect="spark")


def _stored_as_text(spec: ColumnSpec, dialect: Dialect | None) -> bool:
    """Whether a change set for ``dialect`` holds ``spec``'s values as text (see
    :func:`_storable_column`)."""
    if spec.type == "timestamp":
        return dialect == "mysql"
    if spec.type == "decimal":
        return dialect == "bigquery" or (dialect == "mysql" and mysql_keeps_text(spec))
    return False


def _storable_column(
    spec: ColumnSpec, column: exp.Expression, dialect: Dialect | None
) -> exp.Expression:
    """Spark SQL: ``column`` (a value of ``spec``'s column) as
    :func:`~lakesync.destinations.statements.storable_value` gives it for a ``dialect``
    destination's loader, named as the column: for PostgreSQL U+0000 mapped; for MySQL/MariaDB a
    timestamp as its UTC wall time text
    (:data:`~lakesync.destinations.statements.MYSQL_TIMESTAMP_FORMAT`) and a decimal it keeps as
    text as its plain text; for BigQuery's JSON load a decimal as text (a JSON number would be
    read as a double)."""
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
    return exp.Alias(this=mapped, alias=ident(spec.name))


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
    those :func:`~lakesync.destinations.statements.storable_value` gives for that dialect (the
    executors map them). The generated change-set dbt models
    (:func:`lakesync.lakehouse.models.render_change_set_model`) are the same query
    (:func:`change_set_query`) with ``ref()`` calls and the destination's watermark in place of
    the parameters.
    """
    for part in (*rows, *current):
        validate_identifier(part, "lake namespace or table")
    named = [*current, table]
    query = change_set_query(
        table,
        columns,
        rows=exp.Table(this=ident(rows[-1]), db=ident(rows[0]) if len(rows) > 1 else None),
        current=exp.Table(this=ident(named[-1]), db=ident(named[-2])),
        gateway_id=param("gateway_id"),
        table_name=param("table_name"),
        since=param("since"),
        destination=destination,
    )
    return query.sql(dialect="spark")


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
    can store (:func:`~lakesync.destinations.statements.storable_value`). See
    :func:`select_change_set`."""
    layout = TableLayout(table, [column_spec(c) for c in columns], "hard", None, ())
    validate_identifier(deleted, "change-set column")
    a = current.copy()
    a.set("alias", exp.TableAlias(this=ident("a")))
    r = rows.copy()
    r.set("alias", exp.TableAlias(this=ident("r")))
    live = (
        exp.select(
            col("row_id", "a"),
            *(_storable_column(c, col(c.name, "a"), destination) for c in layout.columns),
            exp.alias_(exp.false(), deleted, quoted=True),
            exp.alias_(col("_ingest_hlc", "a"), POSITION, quoted=True),
        )
        .from_(a)
        .where(exp.and_(
            exp.EQ(this=col("gateway_id", "a"), expression=gateway_id.copy()),
            exp.GT(this=col("_ingest_hlc", "a"), expression=since.copy()),
        ))
    )
    gone = (
        exp.select(
            col("row_id", "r"),
            *(
                exp.Cast(this=exp.Null(), to=exp.DataType.build("STRING")
                         if _stored_as_text(c, destination) else _spark_type(c))
                for c in layout.columns
            ),
            exp.true(),
            col("last_ingest_hlc", "r"),
        )
        .from_(r)
        .where(exp.and_(
            exp.EQ(this=col("gateway_id", "r"), expression=gateway_id.copy()),
            exp.EQ(this=col("table_name", "r"), expression=table_name.copy()),
            exp.GT(this=col("last_ingest_hlc", "r"), expression=since.copy()),
            exp.Not(this=col("is_live", "r")),
        ))
    )
    return exp.union(live, gone, distinct=False)
