"""Reading a destination table back: every row, or the rows synced since a watermark."""

from __future__ import annotations

from sqlglot import exp

from lakesync.column_types import Dialect
from lakesync.destinations.statements._build import (
    TableLayout,
    render,
    table_node,
)
from lakesync.sql_ast import col, ident, param


def select_rows(layout: TableLayout, dialect: Dialect) -> str:
    """Every row of the destination table with all its columns, ordered by ``row_id``."""
    names = ["row_id", *layout.column_names, "props", "synced_at"]
    if layout.delete == "soft":
        names.append("deleted_at")
    query = exp.select(*(col(n) for n in names)).from_(table_node(layout)).order_by(col("row_id"))
    return render(query, dialect)


def select_changes(layout: TableLayout, dialect: Dialect, limited: bool = False) -> str:
    """Rows synced after parameter ``since`` (a timestamp), oldest first: what changed in the
    destination since a watermark (soft-deleted rows included, with ``deleted_at`` set).

    ``limited``: only the rows up to and including the instant (``synced_at``) of the
    ``limit``-th such row (parameter ``limit``), so a page of changes never ends inside one
    instant (rows of one change set share it)."""
    names = ["row_id", *layout.column_names, "props", "synced_at"]
    if layout.delete == "soft":
        names.append("deleted_at")
    after = exp.GT(this=col("synced_at"), expression=param("since"))
    where: list[exp.Expression] = [after]
    if limited:
        first = (
            exp.select(col("synced_at"))
            .from_(table_node(layout))
            .where(after.copy())
            .order_by(col("synced_at"))
            .limit(param("limit"))
        )
        cut = exp.select(exp.Max(this=col("synced_at", "f"))).from_(
            exp.Subquery(this=first, alias=exp.TableAlias(this=ident("f")))
        )
        where.append(exp.LTE(this=col("synced_at"), expression=exp.Subquery(this=cut)))
    query = (
        exp.select(*(col(n) for n in names))
        .from_(table_node(layout))
        .where(*where)
        .order_by(col("synced_at"), col("row_id"))
    )
    return render(query, dialect)
