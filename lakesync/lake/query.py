"""Query the lake's Iceberg tables with DuckDB, offline: no Spark, no JVM.

Every table in the catalog becomes a DuckDB view over ``iceberg_scan(<current metadata file>)``,
named ``<namespace>.<table>`` (``analytics.todos``, ``lakesync.landing``); tables of the
``lakesync`` namespace are also visible unqualified (``landing``, ``int_cells_merged``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from lakesync.lake.catalog import open_catalog
from lakesync.lake.settings import LANDING_NAMESPACE, LakeSettings

__all__ = ["OutputFormat", "QueryResult", "connect", "format_rows", "run_query"]

OutputFormat = Literal["table", "json", "csv"]


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Column names and rows of one query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


def _extension_path(module: Any, name: str) -> Path:
    import duckdb

    return Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}" / (
        f"{name}.duckdb_extension"
    )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def connect(settings: LakeSettings) -> Any:
    """An in-memory DuckDB connection with a view per catalog table (see the module docstring)."""
    import duckdb
    import duckdb_extension_avro  # type: ignore[import-untyped]
    import duckdb_extension_iceberg  # type: ignore[import-untyped]

    con = duckdb.connect()
    # The extension wheels ship the binaries; DuckDB cannot download them on these machines.
    for module, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        con.execute(f"LOAD '{_extension_path(module, name)}'")
    catalog = open_catalog(settings)
    for ns in catalog.list_namespaces():
        schema = ".".join(ns)
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}")
        for ident in catalog.list_tables(ns):
            location = catalog.load_table(ident).metadata_location.replace("'", "''")
            scan = f"SELECT * FROM iceberg_scan('{location}')"
            con.execute(f"CREATE VIEW {_quote(schema)}.{_quote(ident[-1])} AS {scan}")
            if schema == LANDING_NAMESPACE:
                con.execute(f"CREATE VIEW main.{_quote(ident[-1])} AS {scan}")
    return con


def run_query(settings: LakeSettings, sql: str) -> QueryResult:
    """Run one SQL statement over the lake and return all its rows."""
    con = connect(settings)
    try:
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description or []]
        return QueryResult(columns, [tuple(r) for r in cursor.fetchall()])
    finally:
        con.close()


def _jsonable(value: Any) -> Any:
    # Decimals are HLCs (uint64) here: decimal strings, like HLCs on the wire (SPEC §1).
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
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
        ["null" if v is None else json.dumps(_jsonable(v)) if isinstance(v, dict | list) else str(v)
         for v in row]
        for row in result.rows
    ]
