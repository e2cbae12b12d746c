"""Fresh reads: the current-state tables plus every delta the pipeline has not merged yet.

``lakesync query --fresh`` answers from ``analytics.<table>`` as the last pipeline run left it,
with the rows touched since replaced by their merged state now: each such row's state in the
merged models (``int_rows_merged`` + ``int_cells_merged``, real clocks) joined, with the core
column-level LWW (:func:`lakesync.merge.apply_delta`), with every later delta, both those in the
landing table past the position the last run covered
(:data:`lakesync.lakehouse.runner.COVERED_PROPERTY`)
and those still only in the hot log (past the landing position). Merging is idempotent, so a
delta the models already hold changes nothing. The typed columns are decoded by the same
functions as the models' UDFs (:mod:`lakesync.spark_udfs.decode`), so a fresh row reads exactly as
the
pipeline will write it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from lakesync.canonical import canonical_json
from lakesync.delta import ColumnValue, RowDelta
from lakesync.lakehouse.catalog import landing_state, open_catalog
from lakesync.lakehouse.checkpoints import covered_positions, lake_rows
from lakesync.lakehouse.landing import HotLogSource
from lakesync.lakehouse.models import table_columns
from lakesync.lakehouse.settings import ANALYTICS_NAMESPACE, LANDING_NAMESPACE, LakeSettings
from lakesync.merge import RowState, apply_delta
from lakesync.spark_udfs.decode import (
    hlc_to_timestamp,
    json_to_boolean,
    json_to_double,
    json_to_json_text,
    json_to_string,
)

__all__ = ["freshen"]

Key = tuple[str, str, str]
"""``(gateway_id, table, row_id)``."""

_DECODE = {
    "string": json_to_string,
    "number": json_to_double,
    "boolean": json_to_boolean,
    "json": json_to_json_text,
}
_SQL_TYPE = {"string": "VARCHAR", "number": "DOUBLE", "boolean": "BOOLEAN", "json": "VARCHAR"}
_cells = msgspec.json.Decoder(list[ColumnValue])


def _after(gw: str, default: int | None, held: dict[str, int]) -> int:
    position = held.get(gw, default)
    return -1 if position is None else position


def _unmerged(
    con: Any, settings: LakeSettings, log: HotLogSource | None
) -> list[tuple[str, int, RowDelta]]:
    """Deltas the models may lack: ``(gateway_id, ingest_hlc, delta)``, in ingest order."""
    catalog = open_catalog(settings)
    covered = covered_positions(catalog)
    merged, merged_held = (None, {}) if covered is None else covered
    landed, landed_held = landing_state(catalog.load_table(f"{LANDING_NAMESPACE}.landing"))
    low = min([-1 if merged is None else merged, *merged_held.values()])
    out: list[tuple[str, int, RowDelta]] = []
    rows = con.execute(
        "select gateway_id, ingest_hlc, op, table_name, row_id, client_id, hlc, columns_json,"
        f" delta_id from {LANDING_NAMESPACE}.landing where ingest_hlc > ? order by ingest_hlc",
        [low],
    ).fetchall()
    for gw, ingest, op, table, row_id, client, hlc, cols, delta_id in rows:
        if ingest > _after(gw, merged, merged_held):
            delta = RowDelta(
                op, table, row_id, client, tuple(_cells.decode(cols)), int(hlc), delta_id
            )
            out.append((gw, int(ingest), delta))
    if log is not None:
        after = min([-1 if landed is None else landed, *landed_held.values()])
        while entries := log.read_log(after, 10_000):
            out.extend(
                (gw, ingest, d)
                for ingest, gw, d in entries
                if ingest > _after(gw, landed, landed_held)
            )
            after = entries[-1][0]
    return out


def _states(con: Any, keys: Iterable[Key]) -> dict[Key, tuple[RowState, int]]:
    """The merged models' state of the given rows (rows they lack are left out)."""
    by_gateway: dict[str, set[tuple[str, str]]] = {}
    for gw, table, row_id in keys:
        by_gateway.setdefault(gw, set()).add((table, row_id))
    out: dict[Key, tuple[RowState, int]] = {}
    if not con.execute(
        "select 1 from duckdb_views() where schema_name = ? and view_name = 'int_rows_merged'",
        [LANDING_NAMESPACE],
    ).fetchall():
        return out
    for gw, wanted in by_gateway.items():
        for (table, row_id), rec in lake_rows(con, gw):
            if (table, row_id) in wanted:
                out[(gw, table, row_id)] = (rec.state, rec.last_ingest)
    return out


def freshen(con: Any, settings: LakeSettings, log: HotLogSource | None) -> int:
    """Make each ``analytics.<table>`` view on ``con`` (a :func:`lakesync.lakehouse.query.connect`
    connection) answer with the deltas not merged yet (``log``: the hot log, if reachable).
    Returns how many rows changed."""
    from lakesync.lakehouse.runner import registered_table_schemas

    deltas = _unmerged(con, settings, log)
    if not deltas:
        return 0
    keys = {(gw, d.table, d.row_id) for gw, _, d in deltas}
    states = _states(con, keys)
    fresh: dict[Key, tuple[RowState, int]] = {}
    for gw, ingest, d in deltas:
        key = (gw, d.table, d.row_id)
        state, last = fresh.get(key) or states.get(key) or (RowState(), 0)
        state = RowState(dict(state.cells), state.write, state.tombstone)
        apply_delta(state, d)
        fresh[key] = (state, max(last, ingest))
    columns = table_columns(registered_table_schemas(settings))
    views = {
        name
        for (name,) in con.execute(
            "select view_name from duckdb_views() where schema_name = ?", [ANALYTICS_NAMESPACE]
        ).fetchall()
    }
    for table, cols in columns.items():
        touched = {k: v for k, v in fresh.items() if k[1] == table}
        if not touched or table not in views:
            continue
        _replace_view(con, table, cols, touched)
    return len(fresh)


def _replace_view(
    con: Any, table: str, cols: list[tuple[str, str]], touched: dict[Key, tuple[RowState, int]]
) -> None:
    """``analytics.<table>`` as the stored rows minus ``touched`` plus the live ones of it."""
    ns = ANALYTICS_NAMESPACE
    stored, changed = f'"{table}__stored"', f'"{table}__fresh"'
    names = ", ".join(f'"{n}" {_SQL_TYPE.get(t, "VARCHAR")}' for n, t in cols)
    con.execute(f'ALTER VIEW {ns}."{table}" RENAME TO {stored}')
    con.execute(
        f"CREATE TEMP TABLE {changed} (gateway_id VARCHAR, row_id VARCHAR, live BOOLEAN"
        f"{', ' + names if names else ''}, _hlc DECIMAL(20,0), _changed_at TIMESTAMPTZ,"
        " _ingest_hlc BIGINT)"
    )
    rows = []
    for (gw, _, row_id), (state, last) in touched.items():
        values = state.visible()
        typed = [
            None
            if values is None
            else _DECODE.get(t, json_to_string)(canonical_json(values.get(n)))
            for n, t in cols
        ]
        hlc = None if state.write is None or values is None else state.write[0]
        rows.append((gw, row_id, values is not None, *typed, hlc, hlc_to_timestamp(hlc), last))
    marks = ", ".join("?" * (6 + len(cols)))
    con.executemany(f"INSERT INTO {changed} VALUES ({marks})", rows)
    keep = ", ".join(
        ["gateway_id", "row_id", *(f'"{n}"' for n, _ in cols), "_hlc", "_changed_at", "_ingest_hlc"]
    )
    con.execute(
        f'CREATE VIEW {ns}."{table}" AS SELECT {keep} FROM {ns}.{stored} s'
        f" WHERE NOT EXISTS (SELECT 1 FROM {changed} f"
        " WHERE f.gateway_id = s.gateway_id AND f.row_id = s.row_id)"
        f" UNION ALL SELECT {keep} FROM {changed} WHERE live"
    )
