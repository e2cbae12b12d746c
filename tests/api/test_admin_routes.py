"""Admin routes (role admin only) and the unauthenticated probes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from tests.api.helpers import Gateway, auth, delta, make_settings, token

SCHEMA = {
    "table": "todos",
    "columns": [{"name": "title", "type": "string"}, {"name": "done", "type": "boolean"}],
}
ADMIN_ROUTES = [
    ("POST", "/v1/admin/flush/gw1", None),
    ("POST", "/v1/admin/schema/gw1", SCHEMA),
    ("POST", "/v1/admin/sync-rules/gw1", {"version": 1, "buckets": []}),
    ("GET", "/v1/admin/connectors/gw1", None),
    ("POST", "/v1/admin/connectors/gw1", {"name": "pg", "type": "postgres"}),
    ("DELETE", "/v1/admin/connectors/gw1/pg", None),
    ("GET", "/v1/admin/metrics/gw1", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
def test_admin_routes_refuse_clients_and_strangers(
    gateway: Gateway, method: str, path: str, body: Any
) -> None:
    for headers, status in [
        ({}, 401),
        (auth(token("alice")), 403),
        (auth(token("root", gw="gw2", role="admin")), 403),
    ]:
        r = gateway.http.request(method, path, json=body, headers=headers)
        assert r.status_code == status, r.text
        assert r.json()["code"] in {"AUTH_ERROR", "FORBIDDEN"}


def test_schema_registration_checks_pushes_and_evolves_additively(gateway: Gateway) -> None:
    r = gateway.admin("POST", "/v1/admin/schema/gw1", json=SCHEMA)
    assert r.status_code == 200 and r.json() == SCHEMA
    alice = token("alice")
    ok = gateway.push(alice, "alice", [delta("INSERT", "r1", "alice", title="a", done=True)])
    assert ok.status_code == 200
    unknown = gateway.push(alice, "alice", [delta("INSERT", "r2", "alice", colour="red")])
    assert unknown.status_code == 422 and unknown.json()["code"] == "SCHEMA_ERROR"
    wrong = gateway.push(alice, "alice", [delta("INSERT", "r2", "alice", done="yes")])
    assert wrong.status_code == 422
    note = delta("INSERT", "n1", "alice", table="notes", z=1)
    other_table = gateway.push(alice, "alice", [note])
    assert other_table.status_code == 200  # unregistered tables are free-form
    grown = SCHEMA | {"columns": [*SCHEMA["columns"], {"name": "colour", "type": "string"}]}
    assert gateway.admin("POST", "/v1/admin/schema/gw1", json=grown).status_code == 200
    colour = gateway.push(alice, "alice", [delta("INSERT", "r2", "alice", colour="red")])
    assert colour.status_code == 200
    shrunk = SCHEMA | {"columns": SCHEMA["columns"][:1]}
    r = gateway.admin("POST", "/v1/admin/schema/gw1", json=shrunk)
    assert r.status_code == 422 and r.json()["code"] == "SCHEMA_ERROR"
    retyped = SCHEMA | {"columns": [{"name": "title", "type": "number"}, SCHEMA["columns"][1]]}
    assert gateway.admin("POST", "/v1/admin/schema/gw1", json=retyped).status_code == 422


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"table": "t; drop table x", "columns": []}, 422, "SCHEMA_ERROR"),
        ({"table": "todos", "columns": [{"name": "a b", "type": "string"}]}, 422, "SCHEMA_ERROR"),
        ({"table": "todos", "columns": [{"name": "a", "type": "uuid"}]}, 422, "SCHEMA_ERROR"),
        ({"columns": []}, 422, "SCHEMA_ERROR"),
        # Not an object at all: the request body itself is malformed.
        ([], 400, "VALIDATION_ERROR"),
    ],
)
def test_bad_schemas_are_rejected(gateway: Gateway, body: Any, status: int, code: str) -> None:
    r = gateway.admin("POST", "/v1/admin/schema/gw1", json=body)
    assert r.status_code == status, r.text
    assert r.json()["code"] == code


@pytest.mark.parametrize(
    "body",
    [
        {"version": 2, "buckets": []},
        {
            "version": 1,
            "buckets": [{"name": "x", "filters": [{"column": "a", "op": "like", "value": "b"}]}],
        },
        {"version": 1, "buckets": [{"name": "x", "tables": ["t; drop table x"]}]},
        {"version": 1},
        "rules",
    ],
)
def test_bad_rules_are_rejected(gateway: Gateway, body: Any) -> None:
    r = gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "VALIDATION_ERROR"


def test_rules_are_persisted_and_stamped(gateway: Gateway) -> None:
    rules = {"version": 1, "buckets": [{"name": "all", "tables": [], "filters": []}]}
    r = gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=rules)
    assert r.status_code == 200 and r.json()["rules"] == rules and int(r.json()["stamp"]) > 0
    again = gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=rules)
    assert again.json()["stamp"] == r.json()["stamp"]


def test_connectors_crud(gateway: Gateway) -> None:
    conn = {"name": "pg", "type": "jira", "url": "http://127.0.0.1:9", "email": "a@b.c"}
    conn |= {"token": "s3cret-api-token", "jql": "project = OPS"}
    shown = conn | {"token": "***"}  # credentials are never returned
    assert gateway.admin("POST", "/v1/admin/connectors/gw1", json=conn).json() == shown
    assert gateway.admin("GET", "/v1/admin/connectors/gw1").json() == {"connectors": [shown]}
    status = gateway.admin("GET", "/v1/admin/connectors/gw1/pg/status")
    assert status.status_code == 200 and status.json()["name"] == "pg"
    bad = gateway.admin("POST", "/v1/admin/connectors/gw1", json={"name": "a b", "type": "x"})
    assert bad.status_code == 400
    for body, problem in [
        (conn | {"type": "nope"}, "kind"),
        (conn | {"interval": -1}, "interval"),
        ({k: v for k, v in conn.items() if k != "email"}, "missing email"),
        (conn | {"token": "${LAKESYNC_TEST_UNSET_VARIABLE}"}, "LAKESYNC_TEST_UNSET_VARIABLE"),
    ]:
        r = gateway.admin("POST", "/v1/admin/connectors/gw1", json=body)
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
        assert problem in r.json()["error"]
    assert gateway.admin("DELETE", "/v1/admin/connectors/gw1/pg").status_code == 204
    missing = gateway.admin("DELETE", "/v1/admin/connectors/gw1/pg")
    assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"
    assert gateway.admin("GET", "/v1/admin/connectors/gw1/pg/status").status_code == 404


def test_flush_and_metrics(gateway: Gateway) -> None:
    alice = token("alice")
    gateway.push(alice, "alice", [delta("INSERT", "r1", "alice", x=1)])
    gateway.pull_page(alice, "alice", 0)
    flush = gateway.admin("POST", "/v1/admin/flush/gw1").json()
    assert flush["flushed"] is False and flush["unflushedBytes"] > 0
    m = gateway.admin("GET", "/v1/admin/metrics/gw1").json()
    assert m["gateway"] == "gw1" and m["pushes"] == 1 and m["pulls"] == 1
    assert m["deltasStored"] == 1 and int(m["hotLogHead"]) > 0
    assert gateway.admin("GET", "/v1/admin/metrics/gw2", gw="gw2").json()["pushes"] == 0
    text = gateway.http.get("/metrics").text
    assert 'lakesync_push_total{gateway="gw1"} 1.0' in text
    assert "lakesync_push_seconds_count 1.0" in text
    assert "lakesync_pull_seconds_count 1.0" in text
    assert "lakesync_hotlog_unflushed_bytes" in text and "lakesync_ws_connections" in text


def test_health_and_ready(gateway: Gateway) -> None:
    assert gateway.http.get("/health").json() == {"status": "ok"}
    assert gateway.http.get("/ready").json() == {"status": "ready"}
    gateway.http.app.state.service.draining = True
    r = gateway.http.get("/ready")
    assert r.status_code == 503 and r.json()["code"] == "BACKPRESSURE_ERROR"
    push = gateway.push(token("alice"), "alice", [delta("INSERT", "r1", "alice", x=1)])
    assert push.status_code == 503


def test_docs_are_served(gateway: Gateway) -> None:
    spec = gateway.http.get("/docs/openapi.json").json()
    assert "/v1/sync/{gw}/push" in spec["paths"]
    assert gateway.http.get("/docs").status_code == 200
    schemas = spec["components"]["schemas"]
    push = spec["paths"]["/v1/sync/{gw}/push"]["post"]["requestBody"]["content"]
    body = schemas[push["application/json"]["schema"]["$ref"].split("/")[-1]]
    assert set(body["properties"]) == {"clientId", "deltas", "lastSeenHlc"}  # the wire's names
    delta = schemas[body["properties"]["deltas"]["items"]["$ref"].split("/")[-1]]
    assert {"rowId", "clientId", "deltaId", "columns"} <= set(delta["properties"])


def test_openapi_documents_the_admin_request_bodies(gateway: Gateway) -> None:
    spec = gateway.http.get("/docs/openapi.json").json()

    def body_schema(path: str) -> dict[str, Any]:
        ref = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        name = ref["$ref"].rsplit("/", 1)[1]
        found: dict[str, Any] = spec["components"]["schemas"][name]
        return found

    def resolve(schema: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in schema:
            return resolve(spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
        return schema

    table = body_schema("/v1/admin/schema/{gw}")
    assert {"table", "columns", "primaryKey", "softDelete", "externalIdColumn"} <= set(
        table["properties"]
    )
    column = resolve(table["properties"]["columns"]["items"])
    assert set(resolve(column["properties"]["type"])["enum"]) == {
        "string",
        "number",
        "boolean",
        "json",
        "null",
    }
    rules = body_schema("/v1/admin/sync-rules/{gw}")
    assert {"version", "buckets"} <= set(rules["properties"])
    bucket = resolve(rules["properties"]["buckets"]["items"])
    rule_filter = resolve(bucket["properties"]["filters"]["items"])
    assert "gte" in resolve(rule_filter["properties"]["op"])["enum"]


def test_flush_route_runs_the_attached_flusher(tmp_path: Path) -> None:
    flushed: list[str] = []

    async def flusher(gw: str) -> None:
        flushed.append(gw)
        store = app.state.service.store
        store.mark_flushed(store.head())

    app = create_app(make_settings(tmp_path), flusher=flusher)
    with TestClient(app) as client:
        gw = Gateway(client)
        gw.push(token("alice"), "alice", [delta("INSERT", "r1", "alice", x=1)])
        body = gw.admin("POST", "/v1/admin/flush/gw1").json()
    assert flushed == ["gw1"]
    assert body["flushed"] is True and body["unflushedBytes"] == 0
    assert int(body["flushedPosition"]) > 0
