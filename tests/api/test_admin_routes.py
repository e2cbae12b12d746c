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
    assert wrong.status_code == 400 and wrong.json()["code"] == "SCHEMA_ERROR"
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


def _owner_rules(table: str, column: str = "owner") -> dict[str, Any]:
    only = {"column": column, "op": "eq", "value": "jwt:sub"}
    return {"version": 1, "buckets": [{"name": "mine", "tables": [table], "filters": [only]}]}


OWNED = {"table": "todos", "columns": [*SCHEMA["columns"], {"name": "owner", "type": "string"}]}


@pytest.mark.parametrize(
    ("rules", "needles"),
    [
        (_owner_rules("todo"), ["bucket 'mine'", "table 'todo'", "did you mean 'todos'?"]),
        (
            _owner_rules("todos", "ownr"),
            ["bucket 'mine'", "table 'todos'", "column 'ownr'", "did you mean 'owner'?"],
        ),
    ],
    ids=["table", "column"],
)
def test_rules_naming_what_no_schema_has_are_refused(
    gateway: Gateway, rules: dict[str, Any], needles: list[str]
) -> None:
    assert gateway.admin("POST", "/v1/admin/schema/gw1", json=OWNED).status_code == 200
    r = gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=rules)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "SCHEMA_ERROR"
    for needle in needles:
        assert needle in r.json()["error"]
    assert gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=_owner_rules("todos")).is_success
    # A schemaless gateway (no schema registered) has nothing to check its rules against.
    free = gateway.admin("POST", "/v1/admin/sync-rules/gw2", gw="gw2", json=_owner_rules("x"))
    assert free.status_code == 200, free.text


def test_a_first_schema_that_would_leave_the_rules_invalid_is_refused(gateway: Gateway) -> None:
    both = _owner_rules("todos")
    both["buckets"][0]["tables"].append("notes")
    assert gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=both).status_code == 200
    r = gateway.admin("POST", "/v1/admin/schema/gw1", json=OWNED)
    assert r.status_code == 422 and r.json()["code"] == "SCHEMA_ERROR", r.text
    assert "table 'notes'" in r.json()["error"] and "rules naming only" in r.json()["error"]
    assert gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=_owner_rules("todos")).is_success
    assert gateway.admin("POST", "/v1/admin/schema/gw1", json=OWNED).status_code == 200
    without_owner = gateway.admin("POST", "/v1/admin/schema/gw1", json=SCHEMA | {"table": "notes"})
    assert without_owner.status_code == 200  # rules naming only todos: notes is free to register


def test_listing_the_connectors_of_an_unknown_gateway_is_404(gateway: Gateway) -> None:
    r = gateway.admin("GET", "/v1/admin/connectors/gw9", gw="gw9")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", r.text
    assert "gateway 'gw9' is not known here" in r.json()["error"]
    assert gateway.admin("POST", "/v1/admin/schema/gw9", gw="gw9", json=SCHEMA).is_success
    known = gateway.admin("GET", "/v1/admin/connectors/gw9", gw="gw9")
    assert known.status_code == 200 and known.json() == {"connectors": []}


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
        "integer",
        "decimal",
        "timestamp",
        "date",
        "bytes",
    }
    assert {"precision", "scale", "nullable"} <= set(column["properties"])
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


TYPED = {
    "table": "orders",
    "columns": [
        {"name": "id", "type": "integer", "nullable": False},
        {"name": "amount", "type": "decimal", "precision": 10, "scale": 2},
        {"name": "at", "type": "timestamp"},
        {"name": "day", "type": "date"},
        {"name": "blob", "type": "bytes"},
    ],
}


def test_typed_pushes_are_checked_and_a_wrong_value_is_refused_with_400(gateway: Gateway) -> None:
    r = gateway.admin("POST", "/v1/admin/schema/gw1", json=TYPED)
    assert r.status_code == 200 and r.json() == TYPED
    alice = token("alice")
    row = {
        "id": "4611686018427387905",
        "amount": "12.50",
        "at": "2024-01-02T03:04:05.000006Z",
        "day": "1969-07-20",
        "blob": "AP8=",
    }
    ok = gateway.push(alice, "alice", [delta("INSERT", "o1", "alice", table="orders", **row)])
    assert ok.status_code == 200, ok.text
    for column, value, canonical in [
        ("amount", "12.5", '"12.50"'),
        ("amount", 12.5, "exactly 2 fraction digits"),
        ("id", "5", "JSON integer number"),
        ("id", 1.5, "integer"),
        ("at", "2024-01-02T03:04:05+01:00", "YYYY-MM-DDTHH:MM:SS.ffffffZ"),
        ("day", "20.7.1969", "YYYY-MM-DD"),
        ("blob", "AP9=", "base64"),
    ]:
        bad = gateway.push(
            alice, "alice", [delta("UPDATE", "o2", "alice", table="orders", **{column: value})]
        )
        assert bad.status_code == 400, (column, value, bad.text)
        body = bad.json()
        assert body["code"] == "SCHEMA_ERROR"
        assert "row 'o2'" in body["error"] and repr(column) in body["error"]
        assert canonical in body["error"], body["error"]
    unset = gateway.push(
        alice, "alice", [delta("INSERT", "o3", "alice", table="orders", amount="1.00")]
    )
    assert unset.status_code == 400 and "'id' is not nullable" in unset.json()["error"]


def test_the_admin_route_widens_a_column_and_refuses_a_narrowing_saying_why(
    gateway: Gateway,
) -> None:
    assert gateway.admin("POST", "/v1/admin/schema/gw1", json=TYPED).status_code == 200
    columns = TYPED["columns"]
    widened = (
        TYPED
        | {
            "columns": [
                {
                    "name": "id",
                    "type": "decimal",
                    "precision": 38,
                    "scale": 0,
                },  # and nullable again
                {"name": "amount", "type": "decimal", "precision": 12, "scale": 3},
                *columns[2:4],
                {"name": "blob", "type": "string"},
            ]
        }
    )
    r = gateway.admin("POST", "/v1/admin/schema/gw1", json=widened)
    assert r.status_code == 200, r.text
    narrowed = widened | {"columns": [{"name": "id", "type": "integer"}, *widened["columns"][1:]]}
    r = gateway.admin("POST", "/v1/admin/schema/gw1", json=narrowed)
    assert r.status_code == 422 and r.json()["code"] == "SCHEMA_ERROR"
    assert "'id' cannot change type from decimal(38,0) to integer" in r.json()["error"]
    assert "add a new column" in r.json()["error"]
    strict = widened | {
        "columns": [*widened["columns"], {"name": "extra", "type": "date", "nullable": False}]
    }
    r = gateway.admin("POST", "/v1/admin/schema/gw1", json=strict)
    assert r.status_code == 422 and "must be nullable" in r.json()["error"]
