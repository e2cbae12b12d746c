"""``lakesync query``: SQL over the lake with DuckDB, from a light module.

Its own module (listed in ``lakesync/cli/main.py``'s ``LAZY_COMMANDS``) so that a query imports
only what it needs: not the pipeline, the destinations or the gateway's stores that ``lakesync
pipeline`` (:mod:`lakesync.cli.lake`) loads. An analyst runs many small queries; each one's start
is most of its time.
"""

from __future__ import annotations

import contextlib
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from lakesync.cli.output import plain, print_table
from lakesync.config import load_config
from lakesync.lakehouse.query import QueryResult, format_rows, run_query, table_cells
from lakesync.lakehouse.settings import LakeSettings

if TYPE_CHECKING:
    from lakesync.hotlog.ports import HotLogSource

__all__ = ["DataDirOption", "FormatOption", "print_result", "query_command"]

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Data dir (default $LAKESYNC_DATA_DIR or ./.lakesync)."),
]
FormatOption = Annotated[
    str, typer.Option("--format", "-f", help="Output: table, json (one object per row), csv.")
]


def _parse_as_of(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not an ISO-8601 timestamp (e.g. 2026-11-22T10:00:00Z)",
            param_hint="--as-of",
        ) from None


def _parse_snapshots(values: list[str]) -> dict[str, int]:
    pins: dict[str, int] = {}
    for value in values:
        table, _, snapshot = (part.strip() for part in value.partition("="))
        try:
            snapshot_id = int(snapshot)
        except ValueError:
            snapshot_id = None
        if not table or snapshot_id is None:
            raise typer.BadParameter(
                f"{value!r}: use TABLE=SNAPSHOT_ID, e.g. lakesync.landing=123",
                param_hint="--snapshot",
            )
        if pins.setdefault(table, snapshot_id) != snapshot_id:
            raise typer.BadParameter(f"{table} pinned twice", param_hint="--snapshot")
    return pins


def query_command(
    sql: Annotated[str, typer.Argument(help="SQL over landing, lakesync.* and analytics.* tables")],
    data_dir: DataDirOption = None,
    fmt: FormatOption = "table",
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            help="Show every table as of this ISO-8601 instant (naive means UTC), e.g. "
            "2026-11-22T10:00:00Z; tables with no snapshot by then are absent.",
        ),
    ] = None,
    snapshot: Annotated[
        list[str] | None,
        typer.Option(
            "--snapshot",
            help="Pin a table to an Iceberg snapshot id: TABLE=ID, e.g. lakesync.landing=123 "
            "(repeatable; wins over --as-of).",
        ),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Include the deltas the pipeline has not merged yet (landing table and hot "
            "log), merged with the same column-level LWW.",
        ),
    ] = False,
) -> None:
    """Run SQL over the lake's Iceberg tables with DuckDB (no Spark), e.g. analytics.todos."""
    if fmt not in ("table", "json", "csv"):
        raise typer.BadParameter("use table, json or csv", param_hint="--format")
    if fresh and (as_of is not None or snapshot):
        raise typer.BadParameter("--fresh reads now; drop --as-of/--snapshot", param_hint="--fresh")
    instant = None if as_of is None else _parse_as_of(as_of)
    pins = _parse_snapshots(snapshot or [])
    settings = LakeSettings.from_env(data_dir)
    with contextlib.ExitStack() as stack:
        log = _hot_log(settings.data_dir, stack) if fresh else None
        result = run_query(settings, sql, as_of=instant, snapshots=pins, fresh=fresh, hot_log=log)
    print_result(result, fmt)


def _hot_log(data_dir: Path, stack: contextlib.ExitStack) -> HotLogSource | None:
    """The gateway's hot log for a fresh read (None when this data dir has none)."""
    # The gateway's stores (psycopg, the hot log's schema): only a fresh read needs them.
    from lakesync.hlc import HLC  # noqa: PLC0415
    from lakesync.hotlog.sharded import open_hot_log  # noqa: PLC0415

    cfg = load_config()
    remote = cfg.store_url.startswith(("postgresql://", "postgres://"))
    if not remote and cfg.store_url == "sqlite" and not (data_dir / "hotlog.sqlite3").exists():
        return None
    store = open_hot_log(cfg.store_url, cfg.shards, data_dir, HLC(), cfg.pg_schema)
    stack.callback(store.close)
    return store


def print_result(result: QueryResult, fmt: str) -> None:
    """Print ``result`` on stdout as ``fmt``: ``json`` or ``csv`` lines, else a table (whole
    when stdout is not a terminal)."""
    if fmt in ("json", "csv"):
        for line in format_rows(result, "json" if fmt == "json" else "csv"):
            sys.stdout.write(line + "\n")
        return
    table = Table()
    for column in result.columns:
        table.add_column(plain(column))
    for row in table_cells(result):
        table.add_row(*(plain(cell) for cell in row))
    print_table(table)
