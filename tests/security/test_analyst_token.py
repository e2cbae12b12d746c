"""An ``analyst`` token reads the lake's SQL endpoint and nothing else (lakesync.tokens.ROLES): the
gateway refuses it with 403 ``FORBIDDEN`` and the spec's error body (docs/protocol.md §5) on the
sync routes, the WebSocket (4403), the admin routes and the console's sign-in, while a client or
admin token of the same gateway passes there; ``lakesync token --role analyst`` mints one."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.exceptions import WebSocketDisconnect
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.tokens import mint_token, verify_token
from tests.api.helpers import SECRET, Gateway, auth, delta, token

ANALYST = mint_token(SECRET, "ana", "gw1", "analyst")
SCHEMA = {"table": "todos", "columns": [{"name": "title", "type": "string"}]}
REFUSAL = ("an analyst token reads the lake's SQL endpoint (lakesync sql-server), not the "
           "gateway; use a client or admin token here")

SYNC_ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/sync/gw1/push",
     {"clientId": "ana", "deltas": []}),
    ("GET", "/v1/sync/gw1/pull?since=0&clientId=ana", None),
    ("GET", "/v1/sync/gw1/pull?since=0", None),
    ("GET", "/v1/sync/gw1/checkpoint", None),
    ("GET", "/v1/sync/gw1/schemas", None),
    ("GET", "/v1/sync/gw1/actions", None),
    ("POST", "/v1/sync/gw1/action", {"clientId": "ana", "actions": []}),
    ("GET", "/sync/gw1/pull?since=0", None),  # the v1 paths without the prefix
]
ADMIN_ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/admin/flush/gw1", None),
    ("POST", "/v1/admin/schema/gw1", SCHEMA),
    ("POST", "/v1/admin/sync-rules/gw1", {"version": 1, "buckets": []}),
    ("GET", "/v1/admin/connectors/gw1", None),
    ("POST", "/v1/admin/connectors/gw1", {"name": "pg", "type": "postgres"}),
    ("GET", "/v1/admin/connectors/gw1/pg/status", None),
    ("DELETE", "/v1/admin/connectors/gw1/pg", None),
    ("GET", "/v1/admin/actions/gw1", None),
    ("GET", "/v1/admin/metrics/gw1", None),
    ("GET", "/v1/admin/status", None),
    ("GET", "/v1/admin/status?all=true", None),
    ("GET", "/v1/admin/status/gw1", None),
    ("POST", "/v1/admin/lake/run", {"job": "pipeline"}),
]


def _assert_refused(r: Any) -> None:
    assert r.status_code == 403, r.text
    assert r.json() == {"error": REFUSAL, "code": "FORBIDDEN",
                        "requestId": r.headers["X-Request-Id"]}


@pytest.mark.parametrize(("method", "path", "body"), SYNC_ROUTES + ADMIN_ROUTES)
def test_an_analyst_token_is_refused_by_every_route(
    gateway: Gateway, method: str, path: str, body: Any
) -> None:
    _assert_refused(gateway.http.request(method, path, json=body, headers=auth(ANALYST)))
    in_query = f"{path}{'&' if '?' in path else '?'}token={ANALYST}"
    _assert_refused(gateway.http.request(method, in_query, json=body))


def test_an_analyst_token_stores_and_reads_nothing(gateway: Gateway) -> None:
    assert gateway.admin("POST", "/v1/admin/schema/gw1", json=SCHEMA).status_code == 200
    alice = token("alice")
    assert gateway.push(alice, "alice", [delta("INSERT", "r1", "alice", title="a")]).is_success
    _assert_refused(gateway.push(ANALYST, "ana", [delta("INSERT", "r2", "ana", title="b")]))
    _assert_refused(gateway.pull_page(ANALYST, "ana", 0))
    rows = gateway.pull_page(alice, "alice", 0).json()["deltas"]
    assert [d["rowId"] for d in rows] == ["r1"]  # the analyst's push stored nothing


def test_client_and_admin_tokens_pass_where_the_analyst_is_refused(gateway: Gateway) -> None:
    assert gateway.pull_page(token("ana"), "ana", 0).status_code == 200
    assert gateway.admin("GET", "/v1/admin/metrics/gw1").status_code == 200
    assert gateway.pull_page(mint_token(SECRET, "ana", "gw1", "admin"), "ana", 0).is_success


@pytest.mark.parametrize("header", [True, False], ids=["header", "query"])
def test_an_analyst_token_is_refused_by_the_websocket(gateway: Gateway, header: bool) -> None:
    path = "/v1/sync/gw1/ws"
    if header:
        sock = gateway.http.websocket_connect(path, headers=auth(ANALYST))
    else:
        sock = gateway.http.websocket_connect(f"{path}?token={ANALYST}")
    with pytest.raises(WebSocketDisconnect) as closed, sock as s:
        s.receive_bytes()
    assert closed.value.code == 4403


def test_an_analyst_token_opens_no_console_session(gateway: Gateway) -> None:
    r = gateway.http.post("/console/session", json={"token": ANALYST},
                          headers={"sec-fetch-site": "same-origin"})
    _assert_refused(r)
    assert "set-cookie" not in r.headers
    admin = mint_token(SECRET, "ana", "gw1", "admin")  # the same request with an admin token
    assert gateway.http.post("/console/session", json={"token": admin},
                             headers={"sec-fetch-site": "same-origin"}).status_code == 204


def test_the_cli_mints_an_analyst_token() -> None:
    result = CliRunner().invoke(
        app, ["token", "--sub", "ana", "--gw", "gw1", "--role", "analyst", "--ttl", "8h"],
        env={"LAKESYNC_JWT_SECRET": SECRET},
    )
    assert result.exit_code == 0, result.output
    minted = result.output.strip()
    assert verify_token(minted, [SECRET], "gw1") == {"sub": "ana", "gw": "gw1", "role": "analyst"}


def test_the_cli_refuses_an_unknown_role() -> None:
    result = CliRunner().invoke(
        app, ["token", "--sub", "ana", "--gw", "gw1", "--role", "reader"],
        env={"LAKESYNC_JWT_SECRET": SECRET},
    )
    assert result.exit_code != 0
    assert "role must be one of ['admin', 'analyst', 'client']" in result.output
