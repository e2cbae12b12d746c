"""Generated models: current state (rendering, schema union, change detection, project links)
and destination change sets (which exist, their SQL, their files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlglot

from lakesync.destination_specs import parse_destinations
from lakesync.errors import ConfigError
from lakesync.lakehouse.models import (
    ChangeSetModel,
    lake_tables,
    mismatched_columns,
    plan_change_sets,
    prepare_project,
    render_change_set_model,
    render_change_set_properties,
    render_model,
    render_properties,
    table_columns,
    write_change_set_models,
    write_models,
)
from lakesync.schema import ColumnSpec, parse_schema


def _schema(table: str, **cols: str):  # type: ignore[no-untyped-def]
    columns = [{"name": n, "type": t} for n, t in cols.items()]
    return parse_schema({"table": table, "columns": columns})


def test_table_columns_unions_gateways_and_leaves_out_only_the_conflicting_table() -> None:
    merged = table_columns([_schema("t", a="string"), _schema("t", a="string", b="number")])
    assert merged == {"t": [ColumnSpec("a", "string"), ColumnSpec("b", "number")]}
    columns, failed = lake_tables(
        [_schema("t", a="string"), _schema("u", a="number"), _schema("t", a="number")]
    )
    assert columns == {"u": [ColumnSpec("a", "number")]}
    assert list(failed) == ["t"] and "column 'a' is string in one gateway" in failed["t"]


def test_a_stored_schema_with_a_reserved_name_fails_its_table_alone() -> None:
    stored = [
        parse_schema({"table": "todos", "columns": [{"name": "_deleted", "type": "boolean"}]},
                     stored=True),
        parse_schema({"table": "lakesync_stage_x", "columns": [{"name": "a", "type": "string"}]},
                     stored=True),
        _schema("notes", body="string"),
    ]
    columns, failed = lake_tables(stored)
    assert columns == {"notes": [ColumnSpec("body", "string")]}
    assert "column name '_deleted' of table 'todos' is reserved" in failed["todos"]
    assert "table name 'lakesync_stage_x' is reserved" in failed["lakesync_stage_x"]


def test_render_model_calls_the_macro_with_the_columns() -> None:
    text = render_model("todos", [("title", "string"), ("n", "number")])
    assert '{{ config(alias="todos") }}' in text
    assert (
        '{{ lakesync_current_state("todos", [{"name": "title", "type": "string"}, '
        '{"name": "n", "type": "number"}]) }}'
    ) in text


def test_write_models_reports_changed_columns_and_drops_stale(tmp_path: Path) -> None:
    first = write_models(tmp_path, {"a": [("x", "string")], "b": [("y", "json")]})
    assert first.models == ["analytics__a", "analytics__b"] and first.changed == []
    same = write_models(tmp_path, {"a": [("x", "string")], "b": [("y", "json")]})
    assert same.changed == []
    grown = write_models(tmp_path, {"a": [("x", "string"), ("z", "boolean")]})
    assert grown.changed == ["analytics__a"]
    assert sorted(p.name for p in (tmp_path / "analytics").glob("*.sql")) == ["analytics__a.sql"]
    assert "analytics__b" not in (tmp_path / "analytics" / "_analytics__models.yml").read_text()


def test_prepare_project_links_the_repository_project(tmp_path: Path) -> None:
    source = tmp_path / "repo"
    (source / "models").mkdir(parents=True)
    (source / "macros").mkdir()
    (source / "dbt_project.yml").write_text("name: x\n")
    run_dir = tmp_path / "data" / "dbt" / "project"
    generated = prepare_project(source, run_dir)
    prepare_project(source, run_dir)  # idempotent
    assert generated == run_dir / "generated" and generated.is_dir()
    assert (run_dir / "dbt_project.yml").read_text() == "name: x\n"
    assert (run_dir / "models").resolve() == (source / "models").resolve()


def _destinations(**bodies: dict[str, object]):  # type: ignore[no-untyped-def]
    base = {"kind": "postgres", "url": "postgresql://h/db", "gateway": "gw1"}
    return parse_destinations({n: {**base, **b} for n, b in bodies.items()}, "lakesync.yaml")


def test_change_sets_are_planned_per_receiving_destination_and_table() -> None:
    specs = _destinations(
        main={"tables": ["todos"], "routes": {"notes": "archive"}, "secondaries": ["copy"]},
        archive={"tables": []},
        copy={"kind": "mysql", "url": "mysql://h/db", "tables": []},
        other={"gateway": "gw2"},
    )
    columns = {"todos": [("title", "string")], "notes": [("body", "string")],
               "tags": [("name", "string")]}
    planned = plan_change_sets(specs, {"gw1": ["todos", "notes", "tags"], "gw2": ["tags"]},
                               columns)
    assert [(m.destination, m.gateway, m.table) for m in planned] == [
        ("archive", "gw1", "notes"),  # a routed table belongs to its route's destination
        ("copy", "gw1", "notes"),  # a secondary gets every table shipped through the primary
        ("copy", "gw1", "todos"),
        ("main", "gw1", "todos"),  # `tags` is not among main's tables
        ("other", "gw2", "tags"),
    ]
    assert planned[-1].name == "changes__other__tags"
    assert planned[-1].columns == (ColumnSpec("name", "string"),)


def test_a_change_set_model_is_the_change_set_query_with_refs_and_the_watermark() -> None:
    model = ChangeSetModel("pg", "gw1", "todos", (("title", "string"), ("n", "number")))
    text = render_change_set_model(model)
    assert "lakesync_change_set_mark(\"pg\", \"todos\")" in text
    assert "lakesync_change_set_unmark()" in text
    assert '{{ ref("analytics__todos") }}' in text and '{{ ref("int_rows_merged") }}' in text
    assert text.count('{{ lakesync_since("pg", "todos") }}') == 2  # both branches
    # With the Jinja replaced the body is one valid Spark query of the typed columns.
    body = text.split("\n", 2)[2]
    for call, table in (('{{ ref("analytics__todos") }}', "analytics.todos"),
                        ('{{ ref("int_rows_merged") }}', "lakesync.int_rows_merged"),
                        ('{{ lakesync_since("pg", "todos") }}', "7")):
        body = body.replace(call, table)
    query = sqlglot.parse_one(body, read="spark")
    first = query.args["this"] if isinstance(query, sqlglot.exp.Union) else query
    assert first.named_selects == ["row_id", "title", "n", "_lakesync_deleted", "_position"]
    assert "'gw1'" in body and "CAST(NULL AS DOUBLE)" in body
    # dbt docs describe the model and each column it selects.
    (props,) = json.loads(render_change_set_properties([model]))["models"]
    assert props["description"]
    assert [c["name"] for c in props["columns"]] == first.named_selects
    assert all(c["description"] for c in props["columns"])


def test_the_current_state_properties_describe_the_model_and_every_column() -> None:
    (props,) = json.loads(render_properties({"todos": [("title", "string")]}))["models"]
    assert props["name"] == "analytics__todos" and "todos" in props["description"]
    names = [c["name"] for c in props["columns"]]
    assert names == ["gateway_id", "row_id", "title", "_hlc", "_changed_at", "_ingest_hlc"]
    assert all(c["description"] for c in props["columns"])


def test_write_change_set_models_drops_undeclared_and_refuses_a_name_clash(
    tmp_path: Path,
) -> None:
    a = ChangeSetModel("pg", "gw1", "todos", (("t", "string"),))
    b = ChangeSetModel("pg", "gw1", "notes", (("t", "string"),))
    assert write_change_set_models(tmp_path, [a, b]) == ["changes__pg__notes", "changes__pg__todos"]
    assert write_change_set_models(tmp_path, [a]) == ["changes__pg__todos"]
    assert sorted(p.name for p in (tmp_path / "changes").iterdir()) == [
        "_changes__models.yml", "changes__pg__todos.sql"
    ]
    clash = [ChangeSetModel("a__b", "gw1", "c", ()), ChangeSetModel("a", "gw1", "b__c", ())]
    with pytest.raises(ConfigError, match="changes__a__b__c"):
        write_change_set_models(tmp_path, clash)


def test_a_column_the_built_table_types_otherwise_is_mismatched() -> None:
    cols = [ColumnSpec("n", "decimal", precision=21, scale=2), ColumnSpec("B", "string"),
            ColumnSpec("at", "timestamp")]
    built = {"n": "decimal(21, 2)", "b": "string", "at": "timestamptz"}
    assert mismatched_columns(cols, built) == []
    assert mismatched_columns(cols, {**built, "n": "long", "b": "binary"}) == ["n", "B"]
    assert mismatched_columns(cols, {"n": "decimal(21, 2)", "b": "string"}) == []  # new: at
