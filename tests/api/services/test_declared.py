"""lakesync.yaml's gateways at start-up vs changes made through the admin API."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.api.services.sync import SyncService
from lakesync.config import GatewayConfig
from lakesync.rules import parse_rules, rules_to_wire
from lakesync.schema import parse_schema
from tests.api.helpers import Gateway, make_settings


def _rules(column: str) -> dict[str, Any]:
    return {
        "version": 1,
        "buckets": [
            {
                "name": "b",
                "tables": ["todos"],
                "filters": [{"column": column, "op": "eq", "value": "jwt:sub"}],
            }
        ],
    }


def _todos(*cols: str) -> dict[str, Any]:
    return {"table": "todos", "columns": [{"name": c, "type": "string"} for c in cols]}


def _declared(schema: dict[str, Any], rules: dict[str, Any]) -> dict[str, GatewayConfig]:
    return {"gw1": GatewayConfig("gw1", [parse_schema(schema)], parse_rules(rules))}


def _start(tmp_path: Path, gateways: dict[str, GatewayConfig]) -> TestClient[Any]:
    return TestClient(create_app(make_settings(tmp_path, gateways=gateways)))


def _state(client: TestClient[Any]) -> tuple[list[str], dict[str, Any] | None]:
    service: SyncService = client.app.state.service
    schema = service.store.list_docs("gw1", "schema")["todos"]
    rules = service.store.get_rules("gw1").rules
    return [c["name"] for c in schema["columns"]], None if rules is None else rules_to_wire(rules)


def test_restart_keeps_admin_changes_until_the_file_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    declared = _declared(_todos("title", "owner"), _rules("owner"))
    with _start(tmp_path, declared) as client:
        gw = Gateway(client)
        r = gw.admin("POST", "/v1/admin/schema/gw1", json=_todos("title", "owner", "stars"))
        assert r.status_code == 200, r.text
        r = gw.admin("POST", "/v1/admin/sync-rules/gw1", json=_rules("title"))
        assert r.status_code == 200, r.text

    # Same file: the start does not fail, and the admin's column and rules stand.
    with _start(tmp_path, declared) as client:
        assert _state(client) == (["title", "owner", "stars"], _rules("title"))
    assert "keeping the sync rules set through the admin API" in caplog.text

    # The file changed: its new column is merged in, its new rules replace the admin's, loudly.
    caplog.clear()
    edited = _declared(_todos("title", "owner", "done"), _rules("done"))
    with _start(tmp_path, edited) as client:
        assert _state(client) == (["title", "owner", "stars", "done"], _rules("done"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert '"column":"title"' in warnings[0] and '"column":"done"' in warnings[0]

    # Rules the file itself set are replaced by its next edit without a warning.
    caplog.clear()
    with _start(tmp_path, _declared(_todos("title"), _rules("owner"))) as client:
        assert _state(client) == (["title", "owner", "stars", "done"], _rules("owner"))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_a_conflicting_declaration_is_a_warning_not_a_failed_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with _start(tmp_path, _declared(_todos("title"), _rules("title"))):
        pass
    retyped = {"table": "todos", "columns": [{"name": "title", "type": "number"}]}
    with _start(tmp_path, _declared(retyped, _rules("title"))) as client:
        assert _state(client)[0] == ["title"]
        service: SyncService = client.app.state.service
        assert service.store.list_docs("gw1", "schema")["todos"]["columns"][0]["type"] == "string"
    assert "is string in the store but declared 'title' number" in caplog.text


def test_a_widening_in_the_file_is_applied_and_a_narrowing_kept_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def typed(amount: dict[str, Any], *extra: dict[str, Any]) -> dict[str, GatewayConfig]:
        schema = {"table": "todos", "columns": [{"name": "amount", **amount}, *extra]}
        return {"gw1": GatewayConfig("gw1", [parse_schema(schema)], None)}

    def amount(client: TestClient[Any]) -> list[dict[str, Any]]:
        service: SyncService = client.app.state.service
        columns: list[dict[str, Any]] = service.store.list_docs("gw1", "schema")["todos"]["columns"]
        return columns

    with _start(tmp_path, typed({"type": "integer"})) as client:
        assert amount(client) == [{"name": "amount", "type": "integer"}]
    wide = {"type": "decimal", "precision": 30, "scale": 2}
    with _start(tmp_path, typed(wide, {"name": "n", "type": "date", "nullable": False})) as client:
        assert amount(client) == [{"name": "amount", **wide}, {"name": "n", "type": "date"}]
    assert "adding it nullable" in caplog.text
    caplog.clear()
    with _start(tmp_path, typed({"type": "integer"})) as client:
        assert amount(client)[0] == {"name": "amount", **wide}
    assert "keeping 'amount' decimal(30,2)" in caplog.text
    assert "only widening is allowed" in caplog.text
