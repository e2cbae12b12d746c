"""Applying a change set: the staging table it is loaded into, one set-based upsert of the live
rows and one delete of the others; and the eviction of lifecycle tiering."""

from __future__ import annotations

from sqlglot import exp

from lakesync.column_types import Dialect
from lakesync.destinations.statements._build import (
    DELETED,
    POSITION,
    TableLayout,
    coldef,
    create_node,
    key_def,
    own_type,
    render,
    table_node,
    value_type,
)
from lakesync.schema import ColumnSpec
from lakesync.sql_ast import col, ident, param


def drop_staging(layout: TableLayout, dialect: Dialect) -> str:
    """``DROP TABLE IF EXISTS`` of the staging table (recreated in the current shape)."""
    drop = exp.Drop(tables=[table_node(layout.staging())], kind="TABLE", exists=True)
    return render(drop, dialect)


def create_staging(layout: TableLayout, dialect: Dialect) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the staging table a change set is loaded into.

    JSON cells arrive as text (their canonical JSON) and are cast by the upsert (so do bytes on
    BigQuery, as base64); ``_position``
    is each row's lake position when a bulk loader fills it (see :func:`staged_summary`).
    """
    staging = layout.staging()
    defs: list[exp.Expression] = [key_def("row_id", dialect, exp.NotNullColumnConstraint())]
    defs += [coldef(c.name, value_type(_staged_spec(c, dialect), dialect))
             for c in layout.columns]
    defs.append(coldef(DELETED, own_type(dialect, "boolean")))
    defs.append(coldef(POSITION, own_type(dialect, "position")))
    if dialect == "mysql":
        # The deletes look rows up by row_id: without a key MariaDB rescans it per target row.
        # PostgreSQL hashes the staged ids instead, so its staging table keeps no index to
        # maintain while loading (a change set holds each row once; a row staged twice by a
        # retried load carries the same state twice).
        defs.append(exp.PrimaryKey(expressions=[ident("row_id")]))
    create = create_node(staging, defs)
    if dialect == "postgres":
        # Staging is refilled every run: PostgreSQL need not write its rows to the WAL (a
        # crash empties an unlogged table, which the next run refills anyway).
        create.set("properties", exp.Properties(expressions=[exp.UnloggedProperty()]))
    return render(create, dialect)


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
    params = [param(f"c{i}") for i in range(len(names) - 1)] + [param("deleted")]
    insert = exp.Insert(
        this=exp.Schema(this=table_node(layout.staging()), expressions=[ident(n) for n in names]),
        expression=exp.Values(expressions=[exp.Tuple(expressions=params)]),
    )
    return render(insert, dialect)


def staged_summary(layout: TableLayout, dialect: Dialect) -> str:
    """How many rows the staging table holds and their greatest ``_position``."""
    query = exp.select(
        exp.Count(this=exp.Star()), exp.Max(this=col(POSITION))
    ).from_(table_node(layout.staging()))
    return render(query, dialect)


def clear_staging(layout: TableLayout, dialect: Dialect) -> str:
    """Empty the staging table (a DELETE, so it can run inside a transaction)."""
    delete = exp.Delete(this=table_node(layout.staging()))
    if dialect == "bigquery":  # BigQuery refuses a DELETE without WHERE
        delete.set("where", exp.Where(this=exp.true()))
    return render(delete, dialect)


def truncate_staging(layout: TableLayout, dialect: Dialect) -> str:
    """``TRUNCATE TABLE`` of the staging table: empties it in constant time, unlike a DELETE of
    every row, but MySQL commits the open transaction first, so run it in one of its own."""
    return render(exp.TruncateTable(expressions=[table_node(layout.staging())]), dialect)


def _staged_value(spec: ColumnSpec, dialect: Dialect) -> exp.Expression:
    staged = col(spec.name, "s")
    if spec.type == "bytes" and dialect == "bigquery":
        return exp.FromBase64(this=staged)
    if spec.type != "json":
        return staged
    if dialect == "bigquery":
        return exp.ParseJSON(this=staged)
    if dialect == "postgres":
        return exp.Cast(this=staged, to=own_type(dialect, "json"))
    return staged  # MySQL/MariaDB JSON is text checked by JSON_VALID


def upsert_from_staging(layout: TableLayout, dialect: Dialect) -> str:
    """Insert or update every live staged row; ``props`` is never written, ``deleted_at`` is
    cleared (a revived row). Parameter ``now``: the sync time."""
    if dialect == "bigquery":
        return _merge_from_staging(layout)
    names = ["row_id", *layout.column_names, "synced_at"]
    values: list[exp.Expression] = [col("row_id", "s")]
    values += [_staged_value(c, dialect) for c in layout.columns]
    values.append(param("now"))
    if layout.delete == "soft":
        names.append("deleted_at")
        values.append(exp.Null())
    live = exp.Not(this=col(DELETED, "s"))
    select = exp.select(*values).from_(table_node(layout.staging(), alias="s")).where(live)
    updated = [n for n in names if n != "row_id"]
    insert = exp.Insert(
        this=exp.Schema(this=table_node(layout), expressions=[ident(n) for n in names]),
        expression=select,
    )
    if dialect == "postgres":
        # An UPDATE of the rows there and an INSERT of the others (both read the snapshot before
        # the statement): half the work of ON CONFLICT's speculative insertion per new row.
        key = exp.EQ(this=col("row_id", "t"), expression=col("row_id", "s"))
        update = exp.Update(
            this=table_node(layout, alias="t"),
            expressions=[
                exp.EQ(this=col(n), expression=v)
                for n, v in zip(names, values, strict=True) if n != "row_id"
            ],
            from_=exp.From(this=table_node(layout.staging(), alias="s")),
            where=exp.Where(this=exp.and_(key, live.copy())),
        )
        there = (exp.select(exp.Literal.number(1)).from_(table_node(layout, alias="t"))
                 .where(key.copy()))
        select.where(exp.Not(this=exp.Exists(this=there)), copy=False)
        insert.set("with_", exp.With(expressions=[
            exp.CTE(this=update, alias=exp.TableAlias(this=ident("updated")))
        ]))
        return render(insert, dialect)
    sets = [
        exp.EQ(this=col(n), expression=exp.Anonymous(this="VALUES", expressions=[col(n)]))
        for n in updated
    ]
    insert.set("conflict", exp.OnConflict(
        duplicate=True, action=exp.var("UPDATE"), expressions=sets
    ))
    return render(insert, dialect)


def _merge_from_staging(layout: TableLayout) -> str:
    target, source = "t", "s"
    updated = [*layout.column_names, "synced_at"]
    values = {c.name: _staged_value(c, "bigquery") for c in layout.columns}
    values["synced_at"] = param("now")
    sets = [exp.EQ(this=col(n), expression=values[n]) for n in updated]
    insert_cols = ["row_id", *updated, "props"]
    insert_vals = [col("row_id", source), *(values[n] for n in updated)]
    insert_vals.append(exp.ParseJSON(this=exp.Literal.string("{}"), is_literal=True))
    if layout.delete == "soft":
        no_time = exp.Cast(this=exp.Null(), to=own_type("bigquery", "timestamp"))
        sets.append(exp.EQ(this=col("deleted_at"), expression=no_time))
    live = exp.Not(this=col(DELETED, source))
    merge = exp.Merge(
        this=table_node(layout, alias=target),
        using=table_node(layout.staging(), alias=source),
        on=exp.EQ(this=col("row_id", target), expression=col("row_id", source)),
        whens=exp.Whens(expressions=[
            exp.When(matched=True, condition=live, then=exp.Update(expressions=sets)),
            exp.When(
                matched=False,
                condition=live,
                then=exp.Insert(
                    this=exp.Tuple(expressions=[col(n) for n in insert_cols]),
                    expression=exp.Tuple(expressions=insert_vals),
                ),
            ),
        ]),
    )
    return render(merge, "bigquery")


def apply_deletes(layout: TableLayout, dialect: Dialect) -> str:
    """Apply the staged deletes: soft sets ``deleted_at`` (and ``synced_at``) to parameter
    ``now`` on rows not already deleted; hard removes the rows."""
    deleted_ids = (
        exp.select(col("row_id", "s"))
        .from_(table_node(layout.staging(), alias="s"))
        .where(col(DELETED, "s"))
    )
    in_staged = exp.In(this=col("row_id"), query=exp.Subquery(this=deleted_ids))
    if layout.delete == "hard":
        return render(exp.Delete(this=table_node(layout), where=exp.Where(this=in_staged)), dialect)
    update = exp.Update(
        this=table_node(layout),
        expressions=[
            exp.EQ(this=col("deleted_at"), expression=param("now")),
            exp.EQ(this=col("synced_at"), expression=param("now")),
        ],
        where=exp.Where(this=exp.and_(
            in_staged, exp.Is(this=col("deleted_at"), expression=exp.Null())
        )),
    )
    return render(update, dialect)


def delete_rows(layout: TableLayout, dialect: Dialect, count: int) -> str:
    """Remove the rows whose ``row_id`` is one of parameters ``r0`` … ``r{count-1}``: lifecycle
    tiering takes rows out of a hot destination once the lake (the cold tier) alone keeps them
    (it picks them by their last change, :mod:`lakesync.lakehouse.lifecycle`)."""
    if count < 1:
        raise ValueError("delete_rows needs at least one row id")
    ids = exp.In(this=col("row_id"), expressions=[param(f"r{i}") for i in range(count)])
    return render(exp.Delete(this=table_node(layout), where=exp.Where(this=ids)), dialect)


def staging_name(layout: TableLayout, dialect: Dialect) -> str:
    """The staging table's quoted, qualified name (for a bulk loader such as Spark's JDBC
    writer, which takes a table name as text)."""
    return render(table_node(layout.staging()), dialect)
