"""Build the gateways' checkpoints from the lake's merged models, after a pipeline run.

Per gateway, every row of ``int_rows_merged`` (row clocks, tombstone, last ingest) with its
cells from ``int_cells_merged`` (each cell's winning value and clock) is exactly the row's merged
state (:class:`~lakesync.merge.RowState`) with its real clocks, as the gateway holds it; the rows
of all the gateway's tables are read with DuckDB (no Spark), streamed in ``(table, row_id)``
order and cut into byte-budgeted chunks (:func:`lakesync.checkpoint_chunks.chunk_rows`), each
staged in the hot-log store with one short write, then published at once.

The position a checkpoint records is what the last successful pipeline run is complete through
(:mod:`lakesync.lakehouse.lake_position`, the landing state it started from). The models may
already hold a few later deltas (a run or flush in between), which is harmless: clients pull
from the position and merging is idempotent. A gateway's checkpoint is rebuilt only when that
position moved past the published one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlglot import exp

from lakesync.checkpoint_chunks import DEFAULT_CHUNK_BYTES, chunk_rows
from lakesync.hotlog.ports import CheckpointSink
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.connection import connect
from lakesync.lakehouse.lake_position import covered_positions
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings
from lakesync.merge import Cell, RowState
from lakesync.sql_ast import col
from lakesync.sql_ast import table as sql_table
from lakesync.views import RowKey, RowRecord

__all__ = [
    "BuiltCheckpoint",
    "CheckpointRun",
    "build_checkpoints",
    "lake_rows",
    "write_checkpoint",
]

_log = logging.getLogger(__name__)

_FETCH = 10_000


@dataclass(frozen=True, slots=True)
class CheckpointRun:
    """What :func:`build_checkpoints` did: the checkpoints it published and every gateway the
    models hold."""

    built: list[BuiltCheckpoint]
    gateways: list[str]


@dataclass(frozen=True, slots=True)
class BuiltCheckpoint:
    """One published checkpoint."""

    gateway_id: str
    position: int
    chunks: int
    rows: int


def write_checkpoint(
    sink: CheckpointSink,
    gateway_id: str,
    position: int,
    rows: Iterable[tuple[RowKey, RowRecord]],
    budget: int = DEFAULT_CHUNK_BYTES,
) -> BuiltCheckpoint | None:
    """Stage ``rows`` (a gateway's merged rows through ``position``) chunk by chunk and publish
    them; None when a checkpoint at or past ``position`` was published meanwhile."""
    chunks = total = 0
    for body, n in chunk_rows(rows, budget):
        sink.stage_checkpoint_chunk(gateway_id, position, chunks, body)
        chunks += 1
        total += n
    if not sink.publish_checkpoint(gateway_id, position, chunks, total):
        return None
    return BuiltCheckpoint(gateway_id, position, chunks, total)


_ROWS_MERGED = sql_table(LANDING_NAMESPACE, "int_rows_merged", alias="r")
_ROWS_SQL = (
    exp.select(
        *(col(n, "r") for n in (
            "table_name", "row_id", "write_hlc", "write_client_id", "delete_hlc",
            "delete_client_id", "last_ingest_hlc",
        )),
        *(col(n, "c") for n in ("column_name", "value_json", "hlc", "client_id")),
    )
    .from_(_ROWS_MERGED)
    .join(
        sql_table(LANDING_NAMESPACE, "int_cells_merged", alias="c"),
        on=exp.and_(*(
            exp.EQ(this=col(n, "c"), expression=col(n, "r"))
            for n in ("gateway_id", "table_name", "row_id")
        )),
        join_type="left",
    )
    .where(exp.EQ(this=col("gateway_id", "r"), expression=exp.Placeholder()))
    .order_by(col("table_name", "r"), col("row_id", "r"))
    .sql(dialect="duckdb")
)
_MERGED_GATEWAYS = (
    exp.select(col("gateway_id")).distinct()
    .from_(sql_table(LANDING_NAMESPACE, "int_rows_merged"))
    .sql(dialect="duckdb")
)


def lake_rows(con: Any, gateway_id: str) -> Iterator[tuple[RowKey, RowRecord]]:
    """A gateway's merged rows from the models on a :func:`lakesync.lakehouse.connection.connect`
    connection,
    in ``(table, row_id)`` order, read in batches."""
    cursor = con.execute(_ROWS_SQL, [gateway_id])
    key: RowKey | None = None
    state = RowState()
    last = 0
    while batch := cursor.fetchmany(_FETCH):
        for t, r, wh, wc, dh, dc, li, column, value, h, cid in batch:
            if (t, r) != key:
                if key is not None:
                    yield key, RowRecord(state, last)
                key = (t, r)
                state = RowState(
                    {},
                    None if wh is None else (int(wh), wc),
                    None if dh is None else (int(dh), dc),
                )
                last = int(li)
            if column is not None:
                state.cells[column] = Cell(msgspec.json.decode(value), int(h), cid)
    if key is not None:
        yield key, RowRecord(state, last)


def build_checkpoints(
    settings: LakeSettings, sink: CheckpointSink, budget: int = DEFAULT_CHUNK_BYTES
) -> CheckpointRun:
    """Publish a checkpoint for every gateway of the models whose covered position moved past
    its published checkpoint."""
    covered = covered_positions(open_catalog(settings))
    if covered is None:
        return CheckpointRun([], [])
    default, held = covered
    con = connect(settings)
    built = []
    try:
        gateways = [
            str(g)
            for (g,) in con.execute(_MERGED_GATEWAYS).fetchall()
        ]
        for gw in sorted(gateways):
            position = held.get(gw, default)
            current = sink.checkpoint(gw)
            if current is not None and current.position >= position:
                continue
            done = write_checkpoint(sink, gw, position, lake_rows(con, gw), budget)
            if done is not None:
                _log.info(
                    "checkpoint of %r published through ingest %d: %d rows in %d chunks",
                    gw,
                    done.position,
                    done.rows,
                    done.chunks,
                )
                built.append(done)
    finally:
        con.close()
    return CheckpointRun(built, sorted(gateways))
