"""The replica's statements built from parts (table and column names, row counts) as sqlglot
ASTs rendered for SQLite (pure). Names are quoted through the AST and values are ``?``
parameters; each statement is rendered once per shape (cached), as the hot paths run the same
few shapes many times."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from sqlglot import exp

from lakesync.sql_ast import col, ident, marks, table

_SQLITE = "sqlite"
_ROW_ID = "row_id"


def _render(node: exp.Expression) -> str:
    return node.sql(dialect=_SQLITE)


def _declared(decltype: str) -> exp.DataType:
    # Kept verbatim: the first word names the sqlite3 converter (LSBOOL, LSJSON, ...) and
    # NUMERIC is an affinity sqlglot would otherwise map to REAL.
    return exp.DataType(this=exp.DataType.Type.USERDEFINED, kind=decltype)


@lru_cache(maxsize=256)
def insert_rows(
    name: str, columns: tuple[str, ...], rows: int, *, replace: bool = False
) -> str:
    """``INSERT [OR REPLACE] INTO name (columns) VALUES`` ``rows`` groups of parameters."""
    group = tuple(marks(len(columns)))
    node = exp.insert(
        exp.values([group] * rows), table(name), columns=[ident(c) for c in columns]
    )
    if replace:
        node.set("alternative", "REPLACE")
    return _render(node)


@lru_cache(maxsize=256)
def delete_row(name: str) -> str:
    """``DELETE FROM name WHERE row_id = ?``."""
    return _render(exp.delete(table(name), where=exp.EQ(this=col(_ROW_ID), expression=marks(1)[0])))


@lru_cache(maxsize=256)
def select_in(name: str, columns: tuple[str, ...], ids: int, order: str | None = None) -> str:
    """``SELECT columns FROM name WHERE tbl = ? AND row_id IN (?, ...)`` for ``ids`` row ids
    (ordered by ``order`` when given)."""
    query = exp.select(*(col(c) for c in columns)).from_(table(name)).where(exp.and_(
        exp.EQ(this=col("tbl"), expression=marks(1)[0]),
        col(_ROW_ID).isin(*marks(ids)),
    ))
    return _render(query.order_by(col(order)) if order else query)


def create_table(name: str, columns: Sequence[tuple[str, str]]) -> str:
    """``CREATE TABLE IF NOT EXISTS name (row_id TEXT PRIMARY KEY, <column> <decltype>...)``."""
    defs = [
        exp.ColumnDef(
            this=ident(_ROW_ID),
            kind=_declared("TEXT"),
            constraints=[exp.ColumnConstraint(kind=exp.PrimaryKeyColumnConstraint())],
        ),
        *(exp.ColumnDef(this=ident(c), kind=_declared(t)) for c, t in columns),
    ]
    return _render(exp.Create(
        this=exp.Schema(this=table(name), expressions=defs), kind="TABLE", exists=True
    ))


def add_column(name: str, column: str, decltype: str) -> str:
    """``ALTER TABLE name ADD COLUMN column decltype``."""
    return _render(exp.Alter(
        this=table(name),
        kind="TABLE",
        actions=[exp.ColumnDef(this=ident(column), kind=_declared(decltype))],
    ))


def drop_column(name: str, column: str) -> str:
    """``ALTER TABLE name DROP COLUMN column``."""
    return _render(exp.Alter(
        this=table(name), kind="TABLE", actions=[exp.Drop(tables=[col(column)], kind="COLUMN")]
    ))
