"""What the lake's SQL endpoint lets an analyst run: an allow-list over parsed statements.

``lakesync sql-server`` puts a front door (:mod:`lakesync.lakehouse.hive_proxy`) before Spark's
Thrift server; every statement a client sends passes :func:`check_statement` first, and what
reaches Spark is the statement *as checked*: a query is parsed with sqlglot's Spark dialect,
checked node by node and generated again from that tree (identifiers quoted, comments dropped),
so a difference between sqlglot's reading of the text and Spark's cannot smuggle anything past
the check. The other statements are rebuilt from their tokens.

Allowed, and nothing else:

- queries (``SELECT``, ``WITH``, set operations, ``VALUES``) whose tables are the lake's:
  ``[lake.]namespace.table`` for a namespace the lake has, an Iceberg metadata table of one
  (``analytics.todos.snapshots``), a bare name (the current namespace) or a ``WITH`` name; time
  travel (``VERSION AS OF``, ``TIMESTAMP AS OF``) included. Functions are Spark's built-ins
  (:data:`lakesync.sql_functions.SPARK_BUILTIN_FUNCTIONS`) less JVM reflection; no user or Hive
  functions, no ``TRANSFORM … USING`` scripts, no path-based sources (``text.`/etc/x```);
- ``EXPLAIN`` and ``DESCRIBE QUERY`` of such a query; ``DESCRIBE`` / ``SHOW`` of the catalog;
- ``USE`` of a lake namespace; ``SET`` of a few session settings that only shape results.

Refused, with a message saying what is allowed: writes and DDL of any kind (``INSERT``,
``INSERT OVERWRITE DIRECTORY``, ``CREATE``, ``DROP``, ``ALTER``, ``CACHE``, ``MERGE``),
``ADD JAR`` / ``ADD FILE``, ``CREATE FUNCTION … USING JAR``, ``SET`` of anything else (and
listing the settings), ``${…}`` variables and parameters (Spark substitutes them from its
environment and settings before it parses), several statements at once, and anything sqlglot
cannot parse.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.errors import SqlglotError
from sqlglot.tokenizer_core import Token, TokenType

from lakesync.errors import ValidationError
from lakesync.sql_functions import SPARK_BUILTIN_FUNCTIONS

__all__ = [
    "LAKE_CATALOG",
    "SESSION_SETTINGS",
    "StatementRefusedError",
    "check_session_config",
    "check_statement",
]

LAKE_CATALOG = "lake"
"""The Spark catalog the lake is (``spark.sql.defaultCatalog``)."""

REFUSED_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect"})
"""Built-ins left out: they call any static Java method (``System.getenv`` included)."""

SPARK_HINTS = frozenset({
    "BROADCAST", "BROADCASTJOIN", "MAPJOIN", "MERGE", "SHUFFLE_MERGE", "MERGEJOIN",
    "SHUFFLE_HASH", "SHUFFLE_REPLICATE_NL", "COALESCE", "REPARTITION", "REPARTITION_BY_RANGE",
    "REBALANCE",
})
"""Spark's query hints (``/*+ REPARTITION(4) */``): they shape the plan, nothing else."""

SESSION_SETTINGS = frozenset({"spark.sql.session.timeZone", "spark.sql.ansi.enabled"})
"""The settings an analyst may ``SET``: they shape results, not what the server reaches."""

ICEBERG_METADATA_TABLES = frozenset({
    "all_data_files", "all_delete_files", "all_entries", "all_files", "all_manifests",
    "data_files", "delete_files", "entries", "files", "history", "manifests",
    "metadata_log_entries", "partitions", "position_deletes", "refs", "snapshots",
})

_FETCH_SIZE = "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size"
_ALLOWED = "SELECT, SHOW, DESCRIBE, EXPLAIN and USE over the lake's tables"
_OTHER_CATALOGS = frozenset({"spark_catalog", "global_temp"})
"""What the Thrift server has besides the lake: Spark's session catalog (an empty in-memory
metastore) and its global temporary views."""
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIALECT = Spark()


class _Tokenizer(Spark.Tokenizer):
    """Spark's tokens, also after ``SHOW`` / ``EXPLAIN`` / ``ADD`` (which sqlglot otherwise
    keeps as one string, the rest of the command)."""

    COMMANDS: ClassVar[set[TokenType]] = set()


_QUERY_STARTS = frozenset({"SELECT", "WITH", "VALUES", "FROM", "(", "TABLE"})
# Words a SHOW / DESCRIBE / USE may hold besides names: enough for every read-only form Spark
# has (SHOW TABLES IN ns LIKE 'p', SHOW TABLE EXTENDED …, DESCRIBE FORMATTED t, SHOW CREATE
# TABLE t AS SERDE, …); the statement's own verb picks the form.
_META_WORDS = frozenset({
    "ALL", "AS", "CATALOGS", "COLUMNS", "CREATE", "CURRENT", "DATABASE", "DATABASES", "EXTENDED",
    "FORMATTED", "FROM", "FUNCTION", "FUNCTIONS", "IN", "LIKE", "NAMESPACE", "NAMESPACES",
    "PARTITIONS", "SCHEMA", "SCHEMAS", "SERDE", "SYSTEM", "TABLE", "TABLES", "TBLPROPERTIES",
    "USER", "VIEWS",
})
_SHOW_FORMS = frozenset({
    "ALL", "CATALOGS", "COLUMNS", "CREATE", "CURRENT", "DATABASES", "FUNCTIONS", "NAMESPACES",
    "PARTITIONS", "SCHEMAS", "SYSTEM", "TABLE", "TABLES", "TBLPROPERTIES", "USER", "VIEWS",
})
_VERBS = frozenset({"SHOW", "DESCRIBE", "DESC", "USE", "NAMESPACE", "DATABASE", "SCHEMA"})
_EXPLAIN_MODES = frozenset({"EXTENDED", "CODEGEN", "COST", "FORMATTED", "LOGICAL"})
_SET = re.compile(r"(?is)\s*set\s+([A-Za-z0-9_.]+)\s*(?:=\s*([A-Za-z0-9_+\-:/.]+))?\s*;?\s*")


class StatementRefusedError(ValidationError):
    """A statement the SQL endpoint does not run; the message says why and what it runs."""


def _refuse(why: str) -> StatementRefusedError:
    return StatementRefusedError(f"refused: {why}; the SQL endpoint is read-only ({_ALLOWED})")


def check_statement(sql: str, namespaces: Collection[str]) -> str:
    """The statement to run for the client's ``sql``, as checked (see the module docstring);
    ``namespaces`` are the lake's. Raises :class:`StatementRefusedError` for anything else."""
    checked = _checked(sql, namespaces)
    if "${" in checked:  # sqlglot writes some parameters (@{x}, $1) so
        raise _refuse("${…} variables and parameters are not run")
    return checked


def _checked(sql: str, namespaces: Collection[str]) -> str:
    if "${" in sql:
        raise _refuse("${…} variables are substituted by Spark before it parses (they read "
                      "the server's environment and settings)")
    tokens = _tokens(sql)
    if not tokens:
        raise _refuse("an empty statement")
    verb = tokens[0].text.upper()
    if verb in _QUERY_STARTS:
        return _query(sql, namespaces)
    if verb == "EXPLAIN":
        mode = tokens[1].text.upper() if len(tokens) > 1 else ""
        rest = 2 if mode in _EXPLAIN_MODES else 1
        if len(tokens) <= rest:
            raise _refuse("EXPLAIN needs a query")
        query = _query(sql[tokens[rest].start :], namespaces)
        return f"EXPLAIN {mode + ' ' if rest == 2 else ''}{query}"
    if verb in ("DESCRIBE", "DESC"):
        return _describe(sql, tokens, namespaces)
    if verb == "SHOW":
        if len(tokens) < 2 or tokens[1].text.upper() not in _SHOW_FORMS:
            raise _refuse("this SHOW lists no catalog object")
        return _rebuild(tokens, namespaces)
    if verb == "USE":
        names = [t for t in tokens[1:] if t.token_type != TokenType.DOT]
        if names and names[0].text.upper() in ("NAMESPACE", "DATABASE", "SCHEMA"):
            names = names[1:]
        path = [t.text for t in names]
        if not 1 <= len(path) <= 2 or not _lake_namespace(path, namespaces):
            raise _refuse(f"USE names no namespace of the lake (it has {_listed(namespaces)})")
        return _rebuild(tokens, namespaces)
    if verb == "SET":
        return _set(sql)
    raise _refuse(f"{verb} statements are not run")


def check_session_config(config: Mapping[str, str], namespaces: Collection[str]) -> dict[str, str]:
    """The settings of a client's new session worth passing on: the database it opens
    (``use:database``, a lake namespace), and the result fetch size; every other setting
    (``set:hiveconf:…``, ``set:hivevar:…``, a proxy user) is left out."""
    kept: dict[str, str] = {}
    for key, value in config.items():
        if key == "use:database":
            if not _lake_namespace([value], namespaces):
                raise _refuse(f"database {value!r} is no namespace of the lake "
                              f"(it has {_listed(namespaces)})")
            kept[key] = value
        elif key == _FETCH_SIZE and value.isdigit():
            kept[key] = value
    return kept


def _listed(namespaces: Collection[str]) -> str:
    return ", ".join(sorted(namespaces)) or "none yet"


def _tokens(sql: str) -> list[Token]:
    """The statement's tokens, without a final ``;``; several statements are refused."""
    try:
        tokens = _Tokenizer().tokenize(sql)
    except SqlglotError as exc:
        raise _refuse(f"the statement does not parse ({exc})") from None
    while tokens and tokens[-1].token_type == TokenType.SEMICOLON:
        tokens.pop()
    if any(t.token_type == TokenType.SEMICOLON for t in tokens):
        raise _refuse("one statement at a time")
    return tokens


def _query(sql: str, namespaces: Collection[str]) -> str:
    """A query checked node by node and generated again from its tree."""
    try:
        parsed = [e for e in sqlglot.parse(sql, read=_DIALECT) if e is not None]
    except SqlglotError as exc:
        raise _refuse(f"the query does not parse ({str(exc).splitlines()[0]})") from None
    if len(parsed) != 1 or not isinstance(parsed[0], (exp.Query, exp.Values)):
        raise _refuse("only a query runs here")
    tree = parsed[0]
    views = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for node in tree.walk():
        _check_node(node, views, namespaces)
    return tree.sql(dialect=_DIALECT, identify=True, comments=False)


def _check_node(node: exp.Expr, views: set[str], namespaces: Collection[str]) -> None:
    if isinstance(node, exp.QueryTransform):
        raise _refuse("TRANSFORM … USING runs a program on the server")
    if isinstance(node, (exp.Into, exp.Insert, exp.Create, exp.Command)):
        raise _refuse("a query may not write")
    if isinstance(node, exp.Func):
        if isinstance(node.parent, exp.Dot) and node.arg_key == "expression":
            raise _refuse("only Spark's built-in functions run here, not catalog functions")
        name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
        if isinstance(node.parent, exp.Hint) and name.upper() in SPARK_HINTS:
            return
        if isinstance(node, exp.Anonymous) and (
            name in REFUSED_FUNCTIONS or name not in SPARK_BUILTIN_FUNCTIONS
        ):
            raise _refuse(f"function {name}() is not one the SQL endpoint runs (JVM reflection, "
                          "user and Hive functions are refused)")
    if isinstance(node, exp.Table) and not isinstance(node.this, exp.Func):
        parts = [p.name for p in node.parts]
        if len(parts) == 1 and parts[0].lower() in views:
            return
        if not _lake_table(parts, namespaces):
            shown = ".".join(parts)
            raise _refuse(f"{shown!r} is not a table of the lake (name tables as "
                          f"namespace.table; the lake has {_listed(namespaces)})")


def _lake_namespace(path: list[str], namespaces: Collection[str]) -> bool:
    """Whether ``path`` (``[ns]`` or ``[lake, ns]``) names one of the lake's namespaces."""
    if not all(_PLAIN.fullmatch(p) for p in path):
        return False
    if len(path) == 2 and path[0].lower() != LAKE_CATALOG:
        return False
    return path[-1].lower() in {n.lower() for n in namespaces}


def _lake_table(parts: list[str], namespaces: Collection[str]) -> bool:
    """Whether ``parts`` names a table of the lake: ``t``, ``ns.t``, ``lake.ns.t`` or
    ``ns.t.<metadata table>``, every part a plain name."""
    if not parts or not all(_PLAIN.fullmatch(p) for p in parts):
        return False
    if len(parts) == 1:
        return True  # the current namespace, which USE keeps inside the lake
    if len(parts) == 2:
        return _lake_namespace(parts[:1], namespaces)
    if len(parts) == 3 and parts[0].lower() == LAKE_CATALOG:
        return _lake_namespace(parts[1:2], namespaces)
    if len(parts) == 3:
        return parts[2].lower() in ICEBERG_METADATA_TABLES and _lake_namespace(
            parts[:1], namespaces)
    return False


def _describe(sql: str, tokens: list[Token], namespaces: Collection[str]) -> str:
    """``DESCRIBE QUERY q`` / ``DESCRIBE q`` checks the query; the other forms are rebuilt."""
    rest = 1
    if len(tokens) > rest and tokens[rest].text.upper() == "QUERY":
        rest += 1
    if len(tokens) > rest and tokens[rest].text.upper() in _QUERY_STARTS - {"TABLE"}:
        return f"DESCRIBE QUERY {_query(sql[tokens[rest].start :], namespaces)}"
    if len(tokens) <= rest:
        raise _refuse("DESCRIBE needs a name")
    return _rebuild(tokens, namespaces)


def _rebuild(tokens: Iterable[Token], namespaces: Collection[str]) -> str:
    """A SHOW / DESCRIBE / USE statement written again from its tokens: words, quoted names,
    strings and dots only; a dotted name must be a lake table or namespace."""
    out: list[str] = []
    path: list[str] = []

    def close_path() -> None:
        if path and path[0].lower() in _OTHER_CATALOGS:
            raise _refuse(f"{path[0]!r} is not the lake's catalog")
        if len(path) > 1 and not (_lake_table(path, namespaces)
                                  or _lake_namespace(path, namespaces)):
            raise _refuse(f"{'.'.join(path)!r} is not a table or namespace of the lake")
        path.clear()

    after_dot = False
    for token in tokens:
        kind, text = token.token_type, token.text
        word = kind != TokenType.IDENTIFIER and text.upper() in _META_WORDS | _VERBS
        if kind == TokenType.DOT and path and not after_dot:
            out.append(".")
            after_dot = True
            continue
        if after_dot and (word or not _PLAIN.fullmatch(text)):
            raise _refuse(f"unexpected {text!r} after a dot")
        if kind == TokenType.STRING:
            close_path()
            out.append(" '" + text.replace("\\", "\\\\").replace("'", "\\'") + "'")
        elif word:
            close_path()
            out.append(" " + text.upper())
        elif _PLAIN.fullmatch(text):
            if not after_dot:
                close_path()
            path.append(text)
            out.append(("" if after_dot else " ") + f"`{text}`")
        else:
            raise _refuse(f"unexpected {text!r} in this statement")
        after_dot = False
    if after_dot:
        raise _refuse("a name ends with a dot")
    close_path()
    return "".join(out).strip()


def _set(sql: str) -> str:
    match = _SET.fullmatch(sql)
    if match is None or match.group(1) not in SESSION_SETTINGS:
        raise _refuse(f"SET changes or lists server settings; only "
                      f"{', '.join(sorted(SESSION_SETTINGS))} may be set")
    key, value = match.groups()
    return f"SET {key}" if value is None else f"SET {key}={value}"
