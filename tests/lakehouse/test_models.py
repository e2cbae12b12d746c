"""Generated current-state models: rendering, schema union, change detection, project links."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.models import (
    prepare_project,
    render_model,
    table_columns,
    write_models,
)
from lakesync.errors import ConfigError
from lakesync.schema import parse_schema


def _schema(table: str, **cols: str):  # type: ignore[no-untyped-def]
    columns = [{"name": n, "type": t} for n, t in cols.items()]
    return parse_schema({"table": table, "columns": columns})


def test_table_columns_unions_gateways_and_rejects_type_conflicts() -> None:
    merged = table_columns([_schema("t", a="string"), _schema("t", a="string", b="number")])
    assert merged == {"t": [("a", "string"), ("b", "number")]}
    with pytest.raises(ConfigError, match="column 'a'"):
        table_columns([_schema("t", a="string"), _schema("t", a="number")])


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
