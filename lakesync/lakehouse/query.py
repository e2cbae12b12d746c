"""Query the lake's Iceberg tables with DuckDB, offline: no Spark, no JVM.

Every table in the catalog becomes a DuckDB view over ``iceberg_scan(<current metadata file>)``,
named ``<namespace>.<table>`` (``analytics.todos``, ``lakesync.landing``); tables of the
``lakesync`` namespace are also visible unqualified (``landing``, ``int_cells_merged``). The
connection is :mod:`lakesync.lakehouse.connection`'s (:func:`connect` and :class:`PinnedTable`
are re-exported here).

Time travel: with ``as_of`` every view scans the snapshot that was current at that instant
(resolved by pyiceberg, scanned with ``iceberg_scan(..., snapshot_from_id => id)``); ``snapshots``
pins single tables to a snapshot id.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from lakesync.errors import NotFoundError
from lakesync.lakehouse.connection import PinnedTable, connect, pinned_connection, utc
from lakesync.lakehouse.fresh import freshen
from lakesync.lakehouse.landing import HotLogSource
from lakesync.lakehouse.settings import ANALYTICS_NAMESPACE, LakeSettings

__all__ = ["OutputFormat", "PinnedTable", "QueryResult", "connect", "format_rows", "run_query"]

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
    has, or saying that ``as_of`` predates the table; other DuckDB errors (syntax, unknown
    column) propagate as DuckDB raises them.
    """
    import duckdb  # noqa: PLC0415  # heavy, optional (extra "pipeline")

    if fresh and (as_of is not None or snapshots):
        raise ValueError("a fresh read is of now: it takes no as_of or snapshots")
    con, absent, pinned = pinned_connection(settings, as_of, snapshots or {})
    try:
        if fresh:
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
