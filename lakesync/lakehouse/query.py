"""Query the lake's Iceberg tables with DuckDB, offline: no Spark, no JVM.

Every table in the catalog becomes a DuckDB view over ``iceberg_scan(<current metadata file>)``,
named ``<namespace>.<table>`` (``analytics.todos``, ``lakesync.landing``); tables of the
``lakesync`` namespace are also visible unqualified (``landing``, ``int_cells_merged``). The
connection is :mod:`lakesync.lakehouse.connection`'s (:func:`connect` and :class:`PinnedTable`
are re-exported here).

Time travel: with ``as_of`` every view scans the snapshot that was current at that instant
(resolved by pyiceberg, scanned with ``iceberg_scan(..., snapshot_from_id => id)``); ``snapshots``
pins single tables to a snapshot id.

The quick way: a plain SELECT over an embedded (SQLite) catalog gets views of only the tables it
names, their metadata locations read straight from the catalog file (no pyiceberg, SQLAlchemy
or pyarrow loaded), the same views the general way makes, so it answers exactly as that would.
Anything else (another catalog, a table function, a name the catalog lacks, time travel, a
fresh read) takes the general way: every table listed and loaded through pyiceberg.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from sqlglot import exp

from lakesync.errors import NotFoundError
from lakesync.lakehouse.catalog import table_locations
from lakesync.lakehouse.connection import (
    PinnedTable,
    connect,
    create_view,
    open_duckdb,
    pinned_connection,
    scan_sql,
    utc,
)
from lakesync.lakehouse.object_store import store_failures_raised
from lakesync.lakehouse.settings import ANALYTICS_NAMESPACE, LANDING_NAMESPACE, LakeSettings

if TYPE_CHECKING:
    from lakesync.hotlog.ports import HotLogSource

__all__ = [
    "OutputFormat", "PinnedTable", "QueryResult", "connect", "format_rows", "quick_query",
    "run_query", "statement_tables",
]

OutputFormat = Literal["table", "json", "csv"]

# DuckDB's CatalogException for a missing table: 'Table with name X does not exist!' or
# 'Table with name "s.X" does not exist because schema "s" does not exist.'
_MISSING_TABLE = re.compile(r'Table with name "?(.+?)"? does not exist')


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Column names and rows of one query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


def _table_list(con: Any) -> str:
    """The tables a query on ``con`` can name, for an error message."""
    rows = con.execute(
        "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal"
    ).fetchall()
    # The analytics tables first: they are what a user usually means to query.
    names = sorted(
        (f"{schema}.{view}" for schema, view in rows if schema != "main"),
        key=lambda name: (not name.startswith(f"{ANALYTICS_NAMESPACE}."), name),
    )
    if not any(name.startswith(f"{ANALYTICS_NAMESPACE}.") for name in names):
        hint = "(`lakesync pipeline run` builds the analytics tables)"
        return f"tables: {', '.join(names)} {hint}" if names else f"it has no tables yet {hint}"
    return f"tables: {', '.join(names)}"


def run_query(
    settings: LakeSettings,
    sql: str,
    *,
    as_of: datetime | None = None,
    snapshots: Mapping[str, int] | None = None,
    fresh: bool = False,
    hot_log: HotLogSource | None = None,
) -> QueryResult:
    """Run one SQL statement over the lake (time travel as in :func:`connect`), return all rows.

    ``fresh`` makes the ``analytics`` tables include the deltas the pipeline has not merged
    yet, from the landing table and from ``hot_log`` when given (:mod:`lakesync.lakehouse.fresh`).

    Naming a table the lake does not have raises :class:`NotFoundError` listing the tables it
    has, or saying that ``as_of`` predates the table; the lake's object store unreachable or
    refusing the credentials raises
    :class:`~lakesync.lakehouse.object_store.ObjectStoreError` (what to check, in one line);
    other DuckDB errors (syntax, unknown column) propagate as DuckDB raises them.
    """
    # DuckDB's httpfs, pyarrow's S3 (a JDBC catalog's metadata reads)
    with store_failures_raised(settings.warehouse, settings.s3.endpoint):
        return _run_query(settings, sql, as_of, snapshots, fresh, hot_log)


def _run_query(
    settings: LakeSettings,
    sql: str,
    as_of: datetime | None,
    snapshots: Mapping[str, int] | None,
    fresh: bool,
    hot_log: HotLogSource | None,
) -> QueryResult:
    import duckdb  # noqa: PLC0415  # heavy, optional (extra "pipeline")

    if fresh and (as_of is not None or snapshots):
        raise ValueError("a fresh read is of now: it takes no as_of or snapshots")
    if not fresh and as_of is None and not snapshots:
        quick = quick_query(settings, sql)
        if quick is not None:
            return quick
    con, absent, pinned = pinned_connection(settings, as_of, snapshots or {})
    try:
        if fresh:
            # Loaded only for a fresh read: the merge, the models and the registry it needs are
            # a tenth of a second of imports that a plain query does without.
            from lakesync.lakehouse.fresh import freshen  # noqa: PLC0415

            freshen(con, settings, hot_log, pinned)
        try:
            cursor = con.execute(sql)
        except duckdb.CatalogException as exc:
            missing = _MISSING_TABLE.search(str(exc))
            if missing is None:
                raise
            named = [t for t in absent if t.rsplit(".", 1)[-1] in str(exc)]
            if as_of is not None and named:
                raise NotFoundError(
                    f"{', '.join(named)} had no snapshot at or before {utc(as_of).isoformat()} "
                    f"(not created yet, still empty, or its snapshots expired)"
                ) from None
            raise NotFoundError(
                f"no table {missing.group(1)} in the lake; {_table_list(con)}"
            ) from None
        columns = [d[0] for d in cursor.description or []]
        return QueryResult(columns, [tuple(r) for r in cursor.fetchall()])
    finally:
        con.close()


def quick_query(settings: LakeSettings, sql: str) -> QueryResult | None:
    """``sql``'s result the quick way (see the module docstring), or None when it needs the
    general way (:func:`run_query` then takes it)."""
    locations = table_locations(settings)
    if locations is None or settings.warehouse_path is None:
        return None  # another catalog or an object-store warehouse: the general way knows them
    con = open_duckdb()
    try:
        # DuckDB's own parser says what the statement reads (it serialises SELECTs only).
        # The text inlined as a literal: a bound parameter makes DuckDB load pandas.
        serialise = exp.select(
            exp.Anonymous(this="json_serialize_sql", expressions=[exp.Literal.string(sql)])
        )
        tree = json.loads(con.execute(serialise.sql(dialect="duckdb")).fetchone()[0])
        named = statement_tables(tree, locations)
        if named is None:
            return None
        for qualified in named:
            create_view(con, qualified, scan_sql(locations[qualified]))
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        return QueryResult(columns, [tuple(r) for r in cursor.fetchall()])
    finally:
        con.close()


def statement_tables(tree: Mapping[str, Any], tables: Collection[str]) -> set[str] | None:
    """The lake tables (of ``tables``, ``namespace.table``) a statement reads, from its syntax
    tree as DuckDB's ``json_serialize_sql`` gives it; None when the statement did not parse, or
    reads anything else (a table function, ``SHOW``/``DESCRIBE``, a file, a name the lake lacks,
    the catalog's own views), whose answer could depend on the views a connection has.

    A name is matched as DuckDB resolves it, case-insensitively: ``ns.table`` the lake table,
    an unqualified ``table`` a ``lakesync`` table or a common table expression of the statement.
    """
    if tree.get("error", True):
        return None
    by_name = {name.lower(): name for name in tables}
    refs: list[Mapping[str, Any]] = []
    ctes: set[str] = set()
    _walk(tree, refs, ctes)
    named: set[str] = set()
    for ref in refs:
        if ref["type"] in _HOLDERS:
            continue
        if (
            ref["type"] != "BASE_TABLE"
            or ref.get("catalog_name", "") not in ("", "memory")
            or ref.get("at_clause") is not None
        ):
            return None
        schema, table = str(ref.get("schema_name", "")).lower(), str(ref["table_name"]).lower()
        if not schema and table in ctes:
            continue
        qualified = by_name.get(
            f"{LANDING_NAMESPACE if schema in ('', 'main') else schema}.{table}"
        )
        if qualified is None:
            return None
        named.add(qualified)
    return named


_HOLDERS = {"JOIN", "SUBQUERY", "EXPRESSION_LIST", "EMPTY", "PIVOT"}
"""The kinds of table reference that read no relation themselves (they hold others, or
``VALUES``); every other kind but a plain table (a table function, ``SHOW``, one a newer DuckDB
adds) takes the general way."""


def _walk(node: Any, refs: list[Mapping[str, Any]], ctes: set[str]) -> None:
    """Collect every table reference and common table expression name under ``node``."""
    if isinstance(node, dict):
        # A table reference, of whatever kind: an alias and a sample, and not an expression.
        if "alias" in node and "sample" in node and "class" not in node:
            refs.append(node)
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            ctes.update(str(entry["key"]).lower() for entry in cte_map.get("map", []))
        for value in node.values():
            _walk(value, refs, ctes)
    elif isinstance(node, list):
        for value in node:
            _walk(value, refs, ctes)


def _jsonable(value: Any) -> Any:
    # Decimals (HLCs, decimal columns) as decimal strings, as on the wire (docs/protocol.md §1).
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):  # base64, as a bytes column's value is on the wire
        return base64.b64encode(value).decode("ascii")
    return value


def format_rows(result: QueryResult, fmt: Literal["json", "csv"]) -> Iterator[str]:
    """Render ``result`` as lines: ``json`` is one JSON object per row, ``csv`` has a header."""
    if fmt == "json":
        for row in result.rows:
            obj = dict(zip(result.columns, (_jsonable(v) for v in row), strict=True))
            yield json.dumps(obj, ensure_ascii=False)
        return
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(result.columns)
    for row in result.rows:
        writer.writerow(
            [json.dumps(_jsonable(v)) if isinstance(v, dict | list) else v for v in row]
        )
    yield from buf.getvalue().splitlines()


def table_cells(result: QueryResult) -> Sequence[Sequence[str]]:
    """Rows as display strings for a terminal table (NULL shown as ``null``)."""
    return [
        [
            "null"
            if v is None
            else json.dumps(_jsonable(v))
            if isinstance(v, dict | list)
            else str(v)
            for v in row
        ]
        for row in result.rows
    ]
