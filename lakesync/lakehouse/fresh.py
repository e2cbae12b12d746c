"""Fresh reads: the current-state tables plus every delta the pipeline has not merged yet.

``lakesync query --fresh`` answers from ``analytics.<table>`` as the last pipeline run left it,
with the rows touched since replaced by their merged state now: each such row's state in the
merged models (``int_rows_merged`` + ``int_cells_merged``, real clocks) joined, with the core
column-level LWW (:func:`lakesync.merge.apply_delta`), with every later delta, both those in the
landing table past the position the last run covered
(:data:`lakesync.lakehouse.lake_position.COVERED_PROPERTY`) and those still only in the hot log
(past the landing position). Merging is idempotent, so a delta the models already hold changes
nothing. The typed columns are decoded by the pure decoders the models' SQL is held equal to
(:mod:`lakesync.cells`), so a fresh row reads exactly as the pipeline will write it.

No gaps: the covered and landed positions are read from the table metadata the connection's
views were made from (:class:`lakesync.lakehouse.connection.PinnedTable`), never from the catalog
again, so a flush or a pipeline commit in between cannot claim deltas the views lack. A
registered table with no ``analytics`` table yet is answered from its merged rows, landing and
the hot log.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlglot import exp

from lakesync.canonical import canonical_json
from lakesync.cells import decoder, hlc_to_timestamp
from lakesync.column_types import decimal_params
from lakesync.delta import ColumnValue, RowDelta
from lakesync.hotlog.ports import HotLogSource
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, ROWS_MERGED_IDENTIFIER, landing_state
from lakesync.lakehouse.checkpoint_builder import lake_rows
from lakesync.lakehouse.connection import PinnedTable
from lakesync.lakehouse.lake_position import covered_by
from lakesync.lakehouse.models import table_columns
from lakesync.lakehouse.registry import registered_table_schemas
from lakesync.lakehouse.settings import ANALYTICS_NAMESPACE, LakeSettings
from lakesync.merge import RowState, apply_delta
from lakesync.schema import ColumnSpec
from lakesync.sql_ast import col, ident, marks
from lakesync.sql_ast import table as sql_table

__all__ = ["freshen"]

Key = tuple[str, str, str]
"""``(gateway_id, table, row_id)``."""

_DUCKDB = "duckdb"
_DUCKDB_TYPE = {
    "number": "DOUBLE", "boolean": "BOOLEAN", "integer": "BIGINT", "timestamp": "TIMESTAMPTZ",
    "date": "DATE", "bytes": "BLOB",
}


def _duckdb_type(spec: ColumnSpec) -> exp.DataType:
    """A column's DuckDB type: what DuckDB reads the lake's (Iceberg) type as."""
    if spec.type == "decimal":
        return exp.DataType.build("DECIMAL({},{})".format(*decimal_params(spec)), dialect=_DUCKDB)
    return exp.DataType.build(_DUCKDB_TYPE.get(spec.type, "VARCHAR"), dialect=_DUCKDB)


_LANDING = sql_table(*LANDING_IDENTIFIER.split("."))
_ROWS_MERGED = sql_table(*ROWS_MERGED_IDENTIFIER.split("."))
_LANDING_READ = (
    exp.select(*(col(c) for c in (
        "gateway_id", "ingest_hlc", "op", "table_name", "row_id", "client_id", "hlc",
        "columns_json", "delta_id",
    )))
    .from_(_LANDING)
    .where(exp.GT(this=col("ingest_hlc"), expression=exp.Placeholder()))
    .order_by(col("ingest_hlc"))
    .sql(dialect=_DUCKDB)
)
_GATEWAYS_OF_TABLES = (
    exp.select(col("gateway_id")).distinct()
    .from_(_ROWS_MERGED)
    .where(exp.Anonymous(this="list_contains", expressions=[exp.Placeholder(), col("table_name")]))
    .sql(dialect=_DUCKDB)
)
_CREATE_ANALYTICS = exp.Create(
    this=sql_table(ANALYTICS_NAMESPACE), kind="SCHEMA", exists=True
).sql(dialect=_DUCKDB)
# The temporary table of the rows a fresh read changed: its own columns around the schema's.
_FRESH_HEAD, _FRESH_TAIL = (
    [exp.ColumnDef(this=ident(n), kind=exp.DataType.build(t, dialect=_DUCKDB)) for n, t in pairs]
    for pairs in (
        (("gateway_id", "VARCHAR"), ("row_id", "VARCHAR"), ("live", "BOOLEAN")),
        (("_hlc", "DECIMAL(20,0)"), ("_changed_at", "TIMESTAMPTZ"), ("_ingest_hlc", "BIGINT")),
    )
)
_cells = msgspec.json.Decoder(list[ColumnValue])


@dataclass(frozen=True, slots=True)
class _Positions:
    """What a connection's views hold: every delta of a gateway ingested at or before
    ``merged_held.get(gw, merged)`` is in the merged models, at or before
    ``landed_held.get(gw, landed)`` in the landing table (None: nothing)."""

    merged: int | None
    merged_held: dict[str, int]
    landed: int | None
    landed_held: dict[str, int]

    def merged_through(self, gw: str) -> int:
        return _through(gw, self.merged, self.merged_held)

    def landed_through(self, gw: str) -> int:
        return _through(gw, self.landed, self.landed_held)


def _through(gw: str, default: int | None, held: dict[str, int]) -> int:
    position = held.get(gw, default)
    return -1 if position is None else position


def _positions(pinned: Mapping[str, PinnedTable]) -> _Positions:
    """The positions as the pinned tables record them, never as the catalog says later: a flush
    or a pipeline run after the views were made would move them past what the views read (a
    gap). ``int_rows_merged`` was loaded before the other models
    (:func:`lakesync.lakehouse.connection.connect`), so they hold at least what it says is covered;
    more is harmless (merging is idempotent)."""
    rows = pinned.get(ROWS_MERGED_IDENTIFIER)
    covered = None if rows is None else covered_by(rows.table)
    merged, merged_held = (None, {}) if covered is None else covered
    landing = pinned.get(LANDING_IDENTIFIER)
    landed, landed_held = (None, {}) if landing is None else landing_state(landing.table)
    return _Positions(merged, merged_held, landed, landed_held)


def _unmerged(
    con: Any, at: _Positions, landing: bool, log: HotLogSource | None
) -> list[tuple[str, int, RowDelta]]:
    """Deltas the models may lack: ``(gateway_id, ingest_hlc, delta)``, in ingest order."""
    out: list[tuple[str, int, RowDelta]] = []
    if landing:
        low = min([-1 if at.merged is None else at.merged, *at.merged_held.values()])
        rows = con.execute(_LANDING_READ, [low]).fetchall()
        for gw, ingest, op, table, row_id, client, hlc, cols, delta_id in rows:
            if ingest > at.merged_through(gw):
                delta = RowDelta(
                    op, table, row_id, client, tuple(_cells.decode(cols)), int(hlc), delta_id
                )
                out.append((gw, int(ingest), delta))
    if log is not None:
        after = min([-1 if at.landed is None else at.landed, *at.landed_held.values()])
        while entries := log.read_log(after, 10_000):
            out.extend(
                (gw, ingest, d) for ingest, gw, d in entries if ingest > at.landed_through(gw)
            )
            after = entries[-1][0]
    return out


def _model_rows(
    con: Any, keys: Collection[Key], tables: Collection[str]
) -> dict[Key, tuple[RowState, int]]:
    """The merged models' state of the rows ``keys`` names and of every row of ``tables``
    (rows they lack are left out)."""
    gateways = {gw for gw, _, _ in keys}
    if tables:
        gateways.update(
            gw
            for (gw,) in con.execute(_GATEWAYS_OF_TABLES, [sorted(tables)]).fetchall()
        )
    out: dict[Key, tuple[RowState, int]] = {}
    for gw in sorted(gateways):
        for (table, row_id), rec in lake_rows(con, gw):
            key = (gw, table, row_id)
            if key in keys or table in tables:
                out[key] = (rec.state, rec.last_ingest)
    return out


def freshen(
    con: Any,
    settings: LakeSettings,
    log: HotLogSource | None,
    pinned: Mapping[str, PinnedTable],
) -> int:
    """Make each ``analytics.<table>`` view on ``con`` answer with the deltas not merged yet
    (``log``: the hot log, if reachable); ``con`` and ``pinned`` are what
    :func:`lakesync.lakehouse.connection.connect` made and the tables its views read. A registered
    table the pipeline has not built yet gets a view of its merged rows and those deltas.
    Returns how many rows changed."""
    at = _positions(pinned)
    columns = table_columns(registered_table_schemas(settings))
    stored = {t: pinned.get(f"{ANALYTICS_NAMESPACE}.{t}") for t in columns}
    unbuilt = {t for t, table in stored.items() if table is None}
    deltas = _unmerged(con, at, LANDING_IDENTIFIER in pinned, log)
    keys = {(gw, d.table, d.row_id) for gw, _, d in deltas}
    states = _model_rows(con, keys, unbuilt) if ROWS_MERGED_IDENTIFIER in pinned else {}
    fresh = {k: v for k, v in states.items() if k[1] in unbuilt}
    for gw, ingest, d in deltas:
        key = (gw, d.table, d.row_id)
        state, last = fresh.get(key) or states.get(key) or (RowState(), 0)
        state = RowState(dict(state.cells), state.write, state.tombstone)
        apply_delta(state, d)
        fresh[key] = (state, max(last, ingest))
    if unbuilt:
        con.execute(_CREATE_ANALYTICS)
    for table, cols in columns.items():
        touched = {k: v for k, v in fresh.items() if k[1] == table}
        if touched or table in unbuilt:
            _replace_view(con, table, cols, touched, stored[table])
    return len(fresh)


def _replace_view(
    con: Any,
    table: str,
    cols: list[ColumnSpec],
    touched: dict[Key, tuple[RowState, int]],
    stored: PinnedTable | None,
) -> None:
    """``analytics.<table>`` as the stored rows (none when the table is not built yet) minus
    ``touched`` plus the live ones of it."""
    changed = f"{table}__fresh"
    defs = [
        *(d.copy() for d in _FRESH_HEAD),
        *(exp.ColumnDef(this=ident(c.name), kind=_duckdb_type(c)) for c in cols),
        *(d.copy() for d in _FRESH_TAIL),
    ]
    con.execute(exp.Create(
        this=exp.Schema(this=sql_table(changed), expressions=defs),
        kind="TABLE",
        properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
    ).sql(dialect=_DUCKDB))
    rows = []
    for (gw, _, row_id), (state, last) in touched.items():
        values = state.visible()
        typed = [
            None if values is None else decoder(c)(canonical_json(values.get(c.name)))
            for c in cols
        ]
        hlc = None if state.write is None or values is None else state.write[0]
        rows.append((gw, row_id, values is not None, *typed, hlc, hlc_to_timestamp(hlc), last))
    if rows:
        insert = exp.insert(exp.values([tuple(marks(len(defs)))]), sql_table(changed))
        con.executemany(insert.sql(dialect=_DUCKDB), rows)
    kept = ["gateway_id", "row_id", *(c.name for c in cols), "_hlc", "_changed_at", "_ingest_hlc"]
    live = exp.select(*(col(n) for n in kept)).from_(sql_table(changed)).where(col("live"))
    view = sql_table(ANALYTICS_NAMESPACE, table)
    if stored is None:
        con.execute(exp.Create(
            this=view, kind="VIEW", replace=True, expression=live
        ).sql(dialect=_DUCKDB))
        return
    # A column added since the last run is not in the stored table yet: null there.
    has = set(stored.table.schema().column_names)
    old = exp.select(
        col("gateway_id", "s"),
        col("row_id", "s"),
        *(
            exp.alias_(
                exp.Cast(this=col(c.name, "s") if c.name in has else exp.Null(),
                         to=_duckdb_type(c)),
                c.name, quoted=True,
            )
            for c in cols
        ),
        col("_hlc", "s"),
        col("_changed_at", "s"),
        col("_ingest_hlc", "s"),
    ).from_(exp.Subquery(this=stored.scan.copy(), alias=exp.TableAlias(this=ident("s"))))
    unmerged = exp.select(exp.Literal.number(1)).from_(sql_table(changed, alias="f")).where(
        exp.and_(
            exp.EQ(this=col("gateway_id", "f"), expression=col("gateway_id", "s")),
            exp.EQ(this=col("row_id", "f"), expression=col("row_id", "s")),
        )
    )
    old = old.where(exp.Not(this=exp.Exists(this=unmerged)))
    con.execute(exp.Create(
        this=view, kind="VIEW", replace=True, expression=exp.union(old, live, distinct=False)
    ).sql(dialect=_DUCKDB))
