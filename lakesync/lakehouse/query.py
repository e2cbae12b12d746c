"""Query the lake's Iceberg tables with DuckDB, offline: no Spark, no JVM.

Every table in the catalog becomes a DuckDB view over ``iceberg_scan(<current metadata file>)``,
named ``<namespace>.<table>`` (``analytics.todos``, ``lakesync.landing``); tables of the
``lakesync`` namespace are also visible unqualified (``landing``, ``int_cells_merged``).

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
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lakesync.errors import NotFoundError
from lakesync.lakehouse.catalog import ROWS_MERGED_IDENTIFIER, open_catalog, require_lake
from lakesync.lakehouse.settings import ANALYTICS_NAMESPACE, LANDING_NAMESPACE, LakeSettings

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from lakesync.lakehouse.landing import HotLogSource

__all__ = ["OutputFormat", "PinnedTable", "QueryResult", "connect", "format_rows", "run_query"]

OutputFormat = Literal["table", "json", "csv"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# DuckDB's CatalogException for a missing table: 'Table with name X does not exist!' or
# 'Table with name "s.X" does not exist because schema "s" does not exist.'
_MISSING_TABLE = re.compile(r'Table with name "?(.+?)"? does not exist')


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Column names and rows of one query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


def _extension_path(module: Any, name: str) -> Path:
    import duckdb

    return (
        Path(module.__file__).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / (f"{name}.duckdb_extension")
    )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _utc(instant: datetime) -> datetime:
    return instant.replace(tzinfo=UTC) if instant.tzinfo is None else instant.astimezone(UTC)


def _snapshot_list(table: Table) -> str:
    recent = sorted(table.snapshots(), key=lambda snap: snap.timestamp_ms)[-5:]
    listed = ", ".join(
        f"{snap.snapshot_id} ({(_EPOCH + timedelta(milliseconds=snap.timestamp_ms)).isoformat()})"
        for snap in reversed(recent)
    )
    return f"newest snapshots: {listed}" if listed else "it has no snapshots"


def _scan(name: str, table: Table, pin: int | None, as_of_ms: int | None) -> str | None:
    """The SELECT behind ``name``'s view, or None when it had no snapshot at ``as_of_ms``."""
    location = table.metadata_location.replace("'", "''")
    if pin is not None:
        if table.snapshot_by_id(pin) is None:
            raise NotFoundError(f"table {name} has no snapshot {pin}; {_snapshot_list(table)}")
        snapshot_id = pin
    elif as_of_ms is not None:
        snapshot = table.snapshot_as_of_timestamp(as_of_ms)
        if snapshot is None:
            return None
        snapshot_id = snapshot.snapshot_id
    else:
        return f"SELECT * FROM iceberg_scan('{location}')"
    return f"SELECT * FROM iceberg_scan('{location}', snapshot_from_id => {snapshot_id})"


@dataclass(frozen=True, slots=True)
class PinnedTable:
    """A catalog table as one connection's view reads it: its metadata as loaded when the view
    was made (snapshots, properties) and the SELECT behind the view."""

    table: Table
    scan: str




def _connect(
    settings: LakeSettings, as_of: datetime | None, snapshots: Mapping[str, int]
) -> tuple[Any, list[str], dict[str, PinnedTable]]:
    """The connection of :func:`connect`, the tables left out because ``as_of`` predates them,
    and every view's table as pinned (by qualified name)."""
    import duckdb
    import duckdb_extension_avro  # type: ignore[import-untyped]
    import duckdb_extension_iceberg  # type: ignore[import-untyped]

    require_lake(settings)
    catalog = open_catalog(settings)
    idents = [ident for ns in catalog.list_namespaces() for ident in catalog.list_tables(ns)]
    # The merged rows first: a fresh read takes the position they cover as merged, and every
    # model view loaded after them is at least that new (lakehouse.fresh).
    idents.sort(key=lambda ident: ".".join(ident) != ROWS_MERGED_IDENTIFIER)
    loaded = {".".join(ident): catalog.load_table(ident) for ident in idents}
    known = sorted(loaded)
    unknown = sorted(set(snapshots) - set(known))
    if unknown:
        raise NotFoundError(f"no table {unknown[0]} in the lake; tables: {', '.join(known)}")
    as_of_ms = None if as_of is None else (_utc(as_of) - _EPOCH) // timedelta(milliseconds=1)
    con = duckdb.connect()
    # Timestamps are instants: they come back as aware datetimes in UTC, whatever the zone.
    con.execute("SET TimeZone = 'UTC'")
    absent: list[str] = []
    pinned: dict[str, PinnedTable] = {}
    try:
        # The extension wheels ship the binaries; DuckDB cannot download them on these machines.
        for module, ext in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
            con.execute(f"LOAD '{_extension_path(module, ext)}'")
        for qualified, table in loaded.items():
            schema, name = qualified.rsplit(".", 1)
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}")
            scan = _scan(qualified, table, snapshots.get(qualified), as_of_ms)
            if scan is None:
                absent.append(qualified)
                continue
            pinned[qualified] = PinnedTable(table, scan)
            con.execute(f"CREATE VIEW {_quote(schema)}.{_quote(name)} AS {scan}")
            if schema == LANDING_NAMESPACE:
                con.execute(f"CREATE VIEW main.{_quote(name)} AS {scan}")
    except BaseException:
        con.close()
        raise
    return con, absent, pinned


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


def connect(
    settings: LakeSettings,
    *,
    as_of: datetime | None = None,
    snapshots: Mapping[str, int] | None = None,
) -> Any:
    """An in-memory DuckDB connection with a view per catalog table (see the module docstring).

    ``as_of`` shows every table as it was at that instant (a naive datetime is UTC); a table with
    no snapshot at or before it (not created yet, still empty, or its snapshots expired) has no
    view. ``snapshots`` maps qualified table names (``lakesync.landing``) to the snapshot id to
    show, over ``as_of``. An unknown table or snapshot id raises :class:`NotFoundError`.
    """
    con, _, _ = _connect(settings, as_of, snapshots or {})
    return con


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
    import duckdb

    if fresh and (as_of is not None or snapshots):
        raise ValueError("a fresh read is of now: it takes no as_of or snapshots")
    con, absent, pinned = _connect(settings, as_of, snapshots or {})
    try:
        if fresh:
            from lakesync.lakehouse.fresh import freshen

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
                    f"{', '.join(named)} had no snapshot at or before {_utc(as_of).isoformat()} "
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
