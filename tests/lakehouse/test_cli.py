"""``lakesync pipeline as-of TABLE HLC``: a table's state rebuilt from the landing deltas with an
HLC at or below the given one, printed by the CLI (dbt compiles the macro, Spark runs it)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.delta import RowDelta
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.runner import run_pipeline
from lakesync.schema import parse_schema

from .conftest import Lake

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

GW = "gw_as_of"
TODOS = parse_schema(
    {
        "table": "todos",
        "columns": [{"name": "title", "type": "string"}, {"name": "n", "type": "number"}],
    }
)


def _todo(op: str, row: str, hlc: int, **cols: Any) -> RowDelta:
    return RowDelta.create(op, "todos", row, "c1", cols, hlc)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def history(lake: Lake) -> Lake:
    """The lake with one history of ``todos`` landed and the pipeline run once."""
    publish_schemas(open_catalog(lake.settings), [(GW, TODOS)])
    lake.land(
        GW,
        [
            _todo("INSERT", "a", 10, title="v1", n=1),
            _todo("INSERT", "b", 11, title="b", n=2),
            _todo("UPDATE", "a", 20, title="v2"),
            _todo("DELETE", "b", 21),
        ],
    )
    run_pipeline(settings=lake.settings, tests=False)
    return lake


def _as_of(lake: Lake, hlc: str) -> list[str]:
    """The lines ``lakesync pipeline as-of todos HLC --format json`` prints."""
    data_dir = str(lake.settings.data_dir)
    args = ["pipeline", "as-of", "todos", hlc, "--data-dir", data_dir, "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def _rows(lines: list[str]) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    return {r["row_id"]: {"title": r["title"], "n": r["n"]} for r in rows if r["gateway_id"] == GW}


def test_pipeline_as_of_prints_the_state_at_that_hlc(history: Lake) -> None:
    assert _rows(_as_of(history, "9")) == {}
    assert _rows(_as_of(history, "10")) == {"a": {"title": "v1", "n": 1}}
    both = {"a": {"title": "v1", "n": 1}, "b": {"title": "b", "n": 2}}
    assert _rows(_as_of(history, "11")) == both
    assert _rows(_as_of(history, "21")) == {"a": {"title": "v2", "n": 1}}


def test_pipeline_as_of_json_is_one_object_per_line_and_nothing_else(history: Lake) -> None:
    lines = _as_of(history, "10")
    assert all(line.startswith("{") for line in lines), lines[:3]
