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

from lakesync.checkpoint_chunks import DEFAULT_CHUNK_BYTES, chunk_rows
from lakesync.hotlog.ports import CheckpointSink
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.connection import connect
from lakesync.lakehouse.lake_position import covered_positions
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings
from lakesync.merge import Cell, RowState
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


_ROWS_SQL = f"""
select r.table_name, r.row_id, r.write_hlc, r.write_client_id, r.delete_hlc,
    r.delete_client_id, r.last_ingest_hlc, c.column_name, c.value_json, c.hlc, c.client_id
from {LANDING_NAMESPACE}.int_rows_merged r
left join {LANDING_NAMESPACE}.int_cells_merged c
    on c.gateway_id = r.gateway_id and c.table_name = r.table_name and c.row_id = r.row_id
where r.gateway_id = ?
order by r.table_name, r.row_id
"""


def lake_rows(con: Any, gateway_id: str) -> Iterator[tuple[RowKey, RowRecord]]:
    """A gateway's merged rows from the models on a :func:`lakesync.lakehouse.connection.connect`
    connection,
    in ``(table, row_id)`` order, read in batches."""
    cursor = con.execute(_ROWS_SQL, [gateway_id])
    key: RowKey | None = None
    state = RowState()
    last = 0
    while batch := cursor.fetchmany(_FETCH):
        for t, r, wh, wc, dh, dc, li, col, value, h, cid in batch:
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
            if col is not None:
                state.cells[col] = Cell(msgspec.json.decode(value), int(h), cid)
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
            for (g,) in con.execute(
                f"select distinct gateway_id from {LANDING_NAMESPACE}.int_rows_merged"
            ).fetchall()
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
