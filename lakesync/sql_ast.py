"""The parts first-party SQL is built from as sqlglot ASTs (pure): quoted identifiers, columns,
qualified tables and bound parameters.

Every statement LakeSync builds from parts (names of tables and columns, values) goes through
these, whatever the engine (SQLite, DuckDB, Spark, PostgreSQL, MySQL, BigQuery): an identifier
is always quoted by the dialect it is rendered for, so a keyword (``order``) is just a name and a
quote in a name stays inside it, and a value is a placeholder the driver binds, never spliced
text. Statements with no parts stay plain constants.
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["col", "ident", "marks", "param", "table"]


def ident(name: str) -> exp.Identifier:
    """``name`` as an identifier, always quoted."""
    return exp.to_identifier(name, quoted=True)


def col(name: str, table: str | None = None) -> exp.Column:
    """The column ``name`` (of the table or alias ``table``), quoted."""
    return exp.column(ident(name), table=ident(table) if table else None)


def table(*parts: str, alias: str | None = None) -> exp.Table:
    """The table named by ``parts`` (``[catalog,] [db,] name``), each part quoted; ``alias``
    names it in a query."""
    node = exp.Table(this=ident(parts[-1]))
    if len(parts) >= 2:
        node.set("db", ident(parts[-2]))
    if len(parts) >= 3:
        node.set("catalog", ident(parts[-3]))
    if alias:
        node.set("alias", exp.TableAlias(this=ident(alias)))
    return node


def param(name: str) -> exp.Placeholder:
    """The named parameter ``name`` (``%(name)s``, ``:name``, ``@name`` as the dialect writes
    it)."""
    return exp.Placeholder(this=name)


def marks(n: int) -> list[exp.Placeholder]:
    """``n`` positional parameters (``?`` in SQLite, DuckDB and Spark, ``%s`` in PostgreSQL)."""
    return [exp.Placeholder() for _ in range(n)]
