"""LakeSync's bookkeeping tables in a destination: the watermarks (``lakesync_watermarks``) and
the tiering marks (``lakesync_tiering``), keyed by (gateway_id, table_name)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from lakesync.column_types import Dialect
from lakesync.destinations.statements._build import (
    TIERING,
    WATERMARKS,
    TableLayout,
    coldef,
    create_node,
    key_def,
    own_type,
    render,
    table_node,
)
from lakesync.sql_ast import col, ident, param


def _bookkeeping(name: str, qualifier: Sequence[str]) -> TableLayout:
    return TableLayout(name, (), "hard", None, qualifier)


def _create_bookkeeping(
    name: str, values: Sequence[str], dialect: Dialect, qualifier: Sequence[str]
) -> str:
    """``CREATE TABLE IF NOT EXISTS name``: keyed by (gateway_id, table_name), a ``position``
    column per name in ``values``, and ``updated_at``."""
    defs: list[exp.Expression] = [
        key_def("gateway_id", dialect, exp.NotNullColumnConstraint(), kind="name"),
        key_def("table_name", dialect, exp.NotNullColumnConstraint(), kind="name"),
        *(coldef(v, own_type(dialect, "position"), exp.NotNullColumnConstraint()) for v in values),
        coldef("updated_at", own_type(dialect, "timestamp"), exp.NotNullColumnConstraint()),
    ]
    key = [ident("gateway_id"), ident("table_name")]
    if dialect == "bigquery":
        defs.append(exp.PrimaryKey(expressions=key, options=[exp.var("NOT ENFORCED")]))
    else:
        defs.append(exp.PrimaryKey(expressions=key))
    return render(create_node(_bookkeeping(name, qualifier), defs), dialect)


def _read_bookkeeping(
    name: str, values: Sequence[str], dialect: Dialect, qualifier: Sequence[str]
) -> str:
    """The ``values`` of parameters ``gateway_id`` and ``table_name`` (no row: none)."""
    query = (
        exp.select(*(col(v) for v in values))
        .from_(table_node(_bookkeeping(name, qualifier)))
        .where(exp.and_(
            exp.EQ(this=col("gateway_id"), expression=param("gateway_id")),
            exp.EQ(this=col("table_name"), expression=param("table_name")),
        ))
    )
    return render(query, dialect)


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
        src = exp.select(*(exp.alias_(param(params[n]), n, quoted=True) for n in names))
        merge = exp.Merge(
            this=table_node(layout, alias="t"),
            using=exp.Subquery(this=src, alias=exp.TableAlias(this=ident("s"))),
            on=exp.and_(
                exp.EQ(this=col("gateway_id", "t"), expression=col("gateway_id", "s")),
                exp.EQ(this=col("table_name", "t"), expression=col("table_name", "s")),
            ),
            whens=exp.Whens(expressions=[
                exp.When(matched=True, then=exp.Update(expressions=[
                    exp.EQ(this=col(n), expression=col(n, "s")) for n in updated
                ])),
                exp.When(matched=False, then=exp.Insert(
                    this=exp.Tuple(expressions=[col(n) for n in names]),
                    expression=exp.Tuple(expressions=[col(n, "s") for n in names]),
                )),
            ]),
        )
        return render(merge, dialect)
    values_row = exp.Values(
        expressions=[exp.Tuple(expressions=[param(params[n]) for n in names])]
    )
    if dialect == "postgres":
        conflict = exp.OnConflict(
            conflict_keys=[ident("gateway_id"), ident("table_name")],
            action=exp.var("DO UPDATE"),
            expressions=[exp.EQ(this=col(n), expression=col(n, "excluded")) for n in updated],
        )
    else:
        conflict = exp.OnConflict(duplicate=True, action=exp.var("UPDATE"), expressions=[
            exp.EQ(this=col(n), expression=exp.Anonymous(this="VALUES", expressions=[col(n)]))
            for n in updated
        ])
    insert = exp.Insert(
        this=exp.Schema(this=table_node(layout), expressions=[ident(n) for n in names]),
        expression=values_row,
        conflict=conflict,
    )
    return render(insert, dialect)


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
