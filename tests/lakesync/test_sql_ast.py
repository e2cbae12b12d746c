"""SQL built from parts goes through sqlglot ASTs (:mod:`lakesync.sql_ast`): the parts render as
expected per dialect, and no new first-party SQL is built as text (f-strings, ``%``,
``.format`` or ``+`` on a statement) beyond the listed ones, each with its reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from sqlglot import exp

from lakesync.sql_ast import col, marks, param, table

ROOT = Path(__file__).resolve().parents[2] / "lakesync"


@pytest.mark.parametrize(("node", "dialect", "expected"), [
    (exp.select(col("order")).from_(table("t")), "sqlite", 'SELECT "order" FROM "t"'),
    (exp.select(col("a", "s")).from_(table("ns", "t", alias="s")), "duckdb",
     'SELECT "s"."a" FROM "ns"."t" AS "s"'),
    (exp.select(col('we"ird')).from_(table("p-1", "d", "t")), "spark",
     "SELECT `we\"ird` FROM `p-1`.`d`.`t`"),
    (exp.select(col("a`b")).from_(table("t")), "mysql", "SELECT `a``b` FROM `t`"),
    (exp.select(col("a")).from_(table("t")).where(col("a").isin(*marks(2))), "sqlite",
     'SELECT "a" FROM "t" WHERE "a" IN (?, ?)'),
    (exp.select(col("a")).from_(table("t")).where(col("a").isin(*marks(2))), "postgres",
     'SELECT "a" FROM "t" WHERE "a" IN (%s, %s)'),
    (exp.select(col("a")).from_(table("t")).where(col("a").eq(param("since"))), "bigquery",
     "SELECT `a` FROM `t` WHERE `a` = @since"),
])
def test_the_parts_render_quoted_and_bound(
    node: exp.Expression, dialect: str, expected: str
) -> None:
    assert node.sql(dialect=dialect) == expected


# A statement keyword (any case) opening the text, or an appended clause (upper case).
_STATEMENT = re.compile(
    r"^\s*\(?\s*(select|insert|update|delete|create|alter|drop|with|merge|pragma|copy|load"
    r"|truncate|describe|replace|set|call|show)\s",
    re.IGNORECASE,
)
_CLAUSE = re.compile(r"^\s*(WHERE|ORDER BY|GROUP BY|FROM|JOIN|LEFT JOIN|UNION|LIMIT|VALUES)\s")

# Text SQL with parts that stays text, by (file, start of the template) -> why.
ALLOWED = {
    ("client/_actions.py", "SELECT {} FROM _ls_actions"):
        "the column list is a module constant",
    ("client/_replica.py", "\nCREATE TABLE IF NOT EXISTS _ls_meta"):
        "the replica's static DDL joined with a constant",
    ("client/_replica.py", "SELECT tbl, row_id, write_hlc"):
        "a one-off migration choosing between two constants (view_base or NULL)",
    ("connectors/_spill.py", "PRAGMA journal_mode = OFF;"):
        "an int (the cache size) in a PRAGMA",
    ("connectors/bigquery.py", "SELECT {} FROM {}"):
        "identifiers quoted by the connector, the cursor bound (@since); a source query is "
        "the user's SQL text, inlined verbatim",
    ("connectors/bigquery.py", "SELECT * FROM {} LIMIT 0"):
        "the user's source query, inlined verbatim to read its schema",
    ("connectors/bigquery.py", " WHERE {} >= @since"): "as above (identifier quoted, bound)",
    ("connectors/bigquery.py", " ORDER BY {}"): "as above (identifiers quoted)",
    ("connectors/database.py", "SELECT {} FROM {}"):
        "MySQL: identifiers quoted by the dialect's quote(), the cursor bound (%s)",
    ("connectors/database.py", " WHERE {} >= %s"): "as above",
    ("connectors/database.py", " ORDER BY {}"): "as above",
    ("connectors/salesforce.py", "SELECT {} FROM {}{} ORDER BY"):
        "SOQL, not SQL: no sqlglot dialect; field and object names are validated",
    ("connectors/salesforce.py", " WHERE LastModifiedDate >= "): "SOQL, as above",
    ("destinations/statements/_ddl.py", "ALTER TABLE {} MODIFY COLUMN "):
        "sqlglot has no MODIFY COLUMN node: its parts are rendered from ASTs",
    ("hotlog/_sql/checkpoints.py", "SELECT upto, chunks, row_count"):
        "a constant clause appended or not",
    ("hotlog/_sql/log.py", "INSERT INTO log ({}) VALUES"): "the column list is a constant",
    ("hotlog/_sql/log.py", "SELECT value FROM counters WHERE"):
        "a constant clause (FOR UPDATE) appended or not",
    ("hotlog/_sql/rows.py", "SELECT tbl, row_id FROM row_index"):
        "only the number of bound parameters varies (SQLite and PostgreSQL from one text)",
    ("hotlog/postgres.py", "COPY log ({}) FROM STDIN"):
        "psycopg's COPY; the column list is a constant",
    ("lakehouse/connection.py", "LOAD {}"):
        "DuckDB's LOAD of a file has no sqlglot node; the path is an AST literal",
    ("lakehouse/object_store.py", "CREATE OR REPLACE SECRET {} ("):
        "DuckDB's CREATE SECRET has no sqlglot node; values are quoted literals",
    ("sql_guard.py", "DESCRIBE QUERY {}"): "the guard rewrites the user's own statement",
    ("sql_guard.py", "SET {}"): "the guard rewrites the user's own statement",
    ("sql_guard.py", "SET changes or lists server"): "an error message",
}


def _template(node: ast.AST) -> str | None:
    """The text of a string built from parts, its parts written ``{}``."""
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add)
            and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
        return node.left.value + "{}"
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format" and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)):
        return node.func.value.value
    return None


def _text_sql() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if "dbt_project" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = _template(node)
            if text and "{" in text and (_STATEMENT.match(text) or _CLAUSE.match(text)):
                found.append((path.relative_to(ROOT).as_posix(), node.lineno, text))
    return found


def test_no_sql_is_built_as_text_beyond_the_listed_sites() -> None:
    unlisted = [
        f"lakesync/{file}:{line}: {text[:60]!r}"
        for file, line, text in _text_sql()
        if not any(file == f and text.startswith(start) for f, start in ALLOWED)
    ]
    assert not unlisted, "build these as sqlglot ASTs (lakesync.sql_ast):\n" + "\n".join(unlisted)


def test_every_listed_site_still_exists() -> None:
    found = _text_sql()
    stale = [
        key for key in ALLOWED
        if not any(file == key[0] and text.startswith(key[1]) for file, _, text in found)
    ]
    assert not stale
