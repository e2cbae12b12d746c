"""Acceptance: dbt models on Spark equal ``lakesync.merge`` for random histories over several runs.

Random histories: shuffled arrival, duplicates, late deltas, equal-HLC ties across clients, HLCs
above 2^63, deletes and revivals, spread over several pipeline runs. Each example lands into its
own gateway of one shared lake (one Spark session per module; a dbt run costs seconds).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lakesync.canonical import canonical_json
from lakesync.delta import RowDelta
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.runner import dbt_invoke, run_pipeline
from lakesync.merge import MergedState
from lakesync.schema import TableSchema, parse_schema

from .conftest import Lake, append_in_order

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

SCHEMAS = [
    parse_schema({"table": "todos", "columns": [
        {"name": "title", "type": "string"},
        {"name": "n", "type": "number"},
        {"name": "done", "type": "boolean"},
        {"name": "meta", "type": "json"},
    ]}),
    parse_schema({"table": "notes", "columns": [{"name": "body", "type": "string"}]}),
]
TYPES = {s.table: s.column_types() for s in SCHEMAS}
HLCS = [5, 6, 7, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1]
_gateways = itertools.count(1)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab", max_size=2),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text("xy", max_size=1), inner, max_size=2)
    ),
    max_leaves=3,
)
VALUES = {
    "string": st.none() | st.text("abé", max_size=3),
    "number": st.none() | st.integers(-3, 3) | st.sampled_from([0.5, -1.25, 1e21]),
    "boolean": st.none() | st.booleans(),
    "json": json_values,
}


@st.composite
def deltas(draw: st.DrawFn) -> RowDelta:
    table = draw(st.sampled_from(sorted(TYPES)))
    row_id = draw(st.sampled_from(["r1", "r2", "r3"]))
    client = draw(st.sampled_from(["c1", "c2", "c3"]))
    hlc = draw(st.sampled_from(HLCS))
    op = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE"]))
    cols: dict[str, Any] = {}
    if op != "DELETE":
        names = draw(st.lists(st.sampled_from(sorted(TYPES[table])), unique=True, max_size=4))
        cols = {n: draw(VALUES[TYPES[table][n]]) for n in names}
    return RowDelta.create(op, table, row_id, client, cols, hlc)


@st.composite
def histories(draw: st.DrawFn) -> list[list[RowDelta]]:
    """Batches of deltas, one per pipeline run: shuffled, with re-delivered duplicates."""
    unique = draw(st.lists(deltas(), min_size=10, max_size=30))
    arrival = draw(st.permutations(unique))
    dups = draw(st.lists(st.sampled_from(unique), max_size=5))
    arrival = arrival + dups
    cut = draw(st.integers(0, len(arrival)))
    return [arrival[:cut], arrival[cut:]]


def expected(all_deltas: list[RowDelta], table: str) -> dict[str, dict[str, Any]]:
    state = MergedState()
    for d in all_deltas:
        state.apply(d)
    out: dict[str, dict[str, Any]] = {}
    for (t, row_id), row in state.rows.items():
        visible = row.visible()
        if t != table or visible is None:
            continue
        typed: dict[str, Any] = {}
        for col, typ in TYPES[table].items():
            value = visible.get(col)
            if typ == "number" and value is not None:
                value = float(value)
            if typ == "json" and value is not None:
                value = canonical_json(value)
            typed[col] = value
        assert row.write is not None
        typed["_hlc"] = row.write[0]
        out[row_id] = typed
    return out


def actual(lake: Lake, gw: str, table: str) -> dict[str, dict[str, Any]]:
    cols = ", ".join(f"`{c}`" for c in TYPES[table])
    sql = f"select row_id, {cols}, _hlc from analytics.{table} where gateway_id = '{gw}'"
    rows = lake.rows(sql)
    return {r.pop("row_id"): {**r, "_hlc": int(r["_hlc"])} for r in rows}


def run(lake: Lake, schemas: list[TableSchema] = SCHEMAS, tests: bool = False) -> Any:
    # Data tests run once per module (test_data_tests_hold_after_random_histories): each dbt
    # build with tests costs twice a plain run.
    return run_pipeline(settings=lake.settings, schemas=schemas, tests=tests)


def _d(op: str, table: str, row: str, client: str, hlc: int, **cols: Any) -> RowDelta:
    return RowDelta.create(op, table, row, client, cols, hlc)  # type: ignore[arg-type]


_revived_title = _d("INSERT", "todos", "r1", "c1", 5, title="old", n=1)
_tombstone = _d("DELETE", "todos", "r1", "c2", 6)
# Every docs/protocol.md §4 corner at once, landing late across two runs: a revival that must hide
# the cells from before its tombstone, a delete winning an exact clock tie at 2^63, an equal-HLC
# tie won by the greater clientId, a late older write losing one cell but winning another, HLCs
# >= 2^63.
CORNERS = [
    [
        _tombstone,
        _d("UPDATE", "todos", "r3", "c2", 5, title="c2 wins tie"),
        _d("INSERT", "todos", "r2", "c1", 2**63, title="tied"),
        _d("INSERT", "notes", "r1", "c1", 7, body="b"),
        _d("UPDATE", "todos", "r3", "c3", 2**64 - 1, done=True),
    ],
    [
        _revived_title,
        _d("UPDATE", "todos", "r1", "c3", 7, n=2),
        _d("DELETE", "todos", "r2", "c1", 2**63),
        _d("UPDATE", "todos", "r3", "c1", 5, title="c1 loses tie", meta={"late": True}),
        _d("UPDATE", "todos", "r3", "c1", 6, done=False, n=3),
        _tombstone,
    ],
]


@settings(
    max_examples=5, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(history=CORNERS)
@given(history=histories())
def test_models_equal_merge_state_over_several_runs(lake: Lake, history: list[list[RowDelta]]):
    gw = f"gw{next(_gateways)}"
    seen: list[RowDelta] = []
    for batch in history:
        lake.land(gw, batch)
        seen += batch
        run(lake)
        for table in TYPES:
            assert actual(lake, gw, table) == expected(seen, table)


def test_data_tests_hold_after_random_histories(lake: Lake) -> None:
    run(lake, tests=True)
    again = run(lake)
    assert again.rows_merged == 0
    assert again.tables_updated == []  # nothing new landed: no table changed


def test_dbt_unit_tests_pass(lake: Lake) -> None:
    result = dbt_invoke(lake.settings, ["test", "--select", "test_type:unit"])
    names = {r.node.name for r in result.result.results}
    assert {
        "int_cells_merged_full_refresh_keeps_lww_winner_per_cell",
        "int_cells_merged_incremental_reads_only_new_landing_rows",
        "int_rows_merged_full_refresh_delete_wins_exact_tie",
        "int_rows_merged_incremental_joins_stored_clocks",
    } <= names
    assert all(str(r.status) == "pass" for r in result.result.results)


def _todo(row: str, client: str, hlc: int, op: str = "UPDATE", **cols: Any) -> RowDelta:
    return RowDelta.create(op, "todos", row, client, cols, hlc)  # type: ignore[arg-type]


def test_time_travel_by_snapshot_and_by_hlc(lake: Lake) -> None:
    from lakesync.lakehouse.catalog import open_catalog
    from lakesync.lakehouse.runner import state_as_of_hlc

    gw = "gw_time"
    first = [_todo("a", "c1", 10, "INSERT", title="v1", n=1), _todo("b", "c1", 11, "INSERT", n=2)]
    later = [_todo("a", "c2", 20, title="v2"), _todo("b", "c2", 21, "DELETE")]
    lake.land(gw, first)
    run(lake)
    snapshot = open_catalog(lake.settings).load_table("analytics.todos").current_snapshot()
    assert snapshot is not None
    lake.land(gw, later)
    run(lake)
    assert actual(lake, gw, "todos") == expected(first + later, "todos")

    cols = ", ".join(f"`{c}`" for c in TYPES["todos"])
    then = lake.rows(
        f"select row_id, {cols}, _hlc from analytics.todos version as of {snapshot.snapshot_id} "
        f"where gateway_id = '{gw}'"
    )
    assert {r.pop("row_id"): {**r, "_hlc": int(r["_hlc"])} for r in then} == expected(
        first, "todos"
    )

    frame = state_as_of_hlc("todos", 11, settings=lake.settings, schemas=SCHEMAS)
    as_of = [r.asDict() for r in frame.where(f"gateway_id = '{gw}'").collect()]
    got = {r["row_id"]: {c: r[c] for c in TYPES["todos"]} | {"_hlc": int(r["_hlc"])} for r in as_of}
    assert got == expected(first, "todos")
    assert got["a"]["title"] == "v1"


def test_adding_a_column_flows_to_its_model(lake: Lake) -> None:
    gw = "gw_evolve"
    v1 = parse_schema({"table": "evolving", "columns": [{"name": "a", "type": "string"}]})
    v2 = parse_schema({"table": "evolving", "columns": [
        {"name": "a", "type": "string"}, {"name": "b", "type": "number"},
    ]})
    lake.land(gw, [RowDelta.create("INSERT", "evolving", "r1", "c1", {"a": "x", "b": 1}, 5)])
    run(lake, [*SCHEMAS, v1])
    assert lake.rows("select * from analytics.evolving")[0].keys() == {
        "gateway_id", "row_id", "a", "_hlc", "_changed_at", "_ingest_hlc"
    }
    lake.land(gw, [RowDelta.create("UPDATE", "evolving", "r2", "c1", {"b": 2.5}, 6)])
    result = run(lake, [*SCHEMAS, v2])
    assert "evolving" in result.tables_updated
    rows = lake.rows("select row_id, a, b from analytics.evolving order by row_id")
    # r1's b landed before the column was registered: the rebuild picks it up too.
    assert rows == [{"row_id": "r1", "a": "x", "b": 1.0}, {"row_id": "r2", "a": None, "b": 2.5}]


def test_duckdb_reads_current_state_offline(lake: Lake) -> None:
    from lakesync.lakehouse.query import format_rows, run_query

    # Its own rows: under xdist the module's lake may be fresh, without the other tests' tables.
    lake.land("gw_duckdb", [_todo("x", "c1", 30, "INSERT", title="t", n=3)])
    run(lake)
    spark_rows = lake.rows("select gateway_id, row_id, title, n, _hlc from analytics.todos")
    sql = "select gateway_id, row_id, title, n, _hlc from analytics.todos"
    result = run_query(lake.settings, sql)
    assert result.columns == ["gateway_id", "row_id", "title", "n", "_hlc"]
    key = lambda r: (r[0], r[1])  # noqa: E731
    assert sorted(result.rows, key=key) == sorted(
        (tuple(r.values()) for r in spark_rows), key=key
    )
    landing = run_query(lake.settings, "select count(*) from landing").rows[0][0]
    assert landing == lake.rows("select count(*) as n from lakesync.landing")[0]["n"]
    one = run_query(lake.settings, "select * from analytics.todos limit 1")
    lines = list(format_rows(one, "json"))
    assert len(lines) == 1 and '"_hlc": "' in lines[0]  # HLCs stay exact, as decimal strings


def test_cli_pipeline_run_reads_schemas_from_config(
    lake: Lake, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from typer.testing import CliRunner

    from lakesync.cli.lake import pipeline_app, query_command

    config = tmp_path / "lakesync.yaml"
    schemas = [{"table": s.table, "columns": [{"name": c.name, "type": c.type} for c in s.columns]}
               for s in SCHEMAS]
    config.write_text(json.dumps({"gateways": {"gw_cli": {"schemas": schemas}}}))
    monkeypatch.setenv("LAKESYNC_CONFIG", str(config))
    lake.land("gw_cli", [_todo("x", "c1", 50, "INSERT", title="from cli")])
    runner = CliRunner()
    out = runner.invoke(
        pipeline_app, ["run", "--no-tests", "--data-dir", str(lake.settings.data_dir)]
    )
    assert out.exit_code == 0, out.output
    assert "rows merged" in out.output and "todos" in out.output
    # Off a terminal: no progress while it ran, one line at the end counting dbt's planned nodes.
    done = re.search(r"^pipeline run: (\d+)/(\d+) nodes, none failed, ", out.output, re.M)
    assert done is not None and done[1] == done[2] != "0", out.output

    import typer

    app = typer.Typer()
    app.command()(query_command)
    q = runner.invoke(app, [
        "--data-dir", str(lake.settings.data_dir), "--format", "json",
        "select row_id, title from analytics.todos where gateway_id = 'gw_cli'",
    ])
    assert q.exit_code == 0, q.output
    assert json.loads(q.stdout.strip()) == {"row_id": "x", "title": "from cli"}


def test_rows_of_a_held_back_gateway_that_land_late_reach_the_models(lake: Lake) -> None:
    """A gateway whose rows could not land is held back while others go on and the models move
    past its ingest positions; when it catches up, the next run rebuilds the models in full so
    its rows (behind the watermark) are merged too."""
    catalog = open_catalog(lake.settings)
    table_dir = urlparse(catalog.load_table(LANDING_IDENTIFIER).location()).path
    blocker = Path(table_dir) / "data" / "gateway_id=late_gw"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory: late_gw's rows cannot be written")
    base = 10**12
    late = [_d("INSERT", "todos", f"l{i}", "c1", base + i, title="late") for i in range(3)]
    on_time = [
        _d("INSERT", "todos", f"o{i}", "c1", base + 10 + i, title="on time") for i in range(3)
    ]
    append_in_order(lake.log, [("late_gw", d) for d in late])
    append_in_order(lake.log, [("ontime_gw", d) for d in on_time])
    assert LandingFlusher(open_catalog(lake.settings), lake.log).flush().held == ("late_gw",)
    run(lake)
    assert set(actual(lake, "ontime_gw", "todos")) == {"o0", "o1", "o2"}
    assert actual(lake, "late_gw", "todos") == {}

    blocker.unlink()
    assert LandingFlusher(open_catalog(lake.settings), lake.log).flush().held == ()
    run(lake)
    assert set(actual(lake, "late_gw", "todos")) == {"l0", "l1", "l2"}
    assert set(actual(lake, "ontime_gw", "todos")) == {"o0", "o1", "o2"}
