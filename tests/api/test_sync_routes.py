"""Every sync route over HTTP: happy paths and the protocol's 4xx for bad input (never 5xx)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from tests.api.helpers import (
    PREVIOUS_SECRET,
    SECRET,
    Gateway,
    Replica,
    auth,
    delta,
    make_settings,
    now_hlc,
    token,
)
from tests.wire_json import as_json

ALICE = token("alice")


def error(r: Any, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["code"] == code and isinstance(body["error"], str) and body["error"]


def test_push_then_pull_round_trip(gateway: Gateway) -> None:
    d1 = delta("INSERT", "r1", "alice", title="a", done=False)
    r = gateway.push(ALICE, "alice", [d1], evictions=True)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["accepted"] == 1 and body["deltas"] == [as_json(d1)]
    assert int(body["serverHlc"]) > d1.hlc
    pulled = gateway.pull_page(ALICE, "alice", 0).json()
    assert pulled["deltas"] == [as_json(d1)]
    assert pulled["serverHlc"] == body["serverHlc"] and pulled["hasMore"] is False
    again = gateway.pull_page(ALICE, "alice", int(pulled["serverHlc"])).json()
    assert again["deltas"] == [] and again["serverHlc"] == pulled["serverHlc"]


def test_a_v1_client_is_answered_a_push_cursor_that_skips_nothing(gateway: Gateway) -> None:
    """A client without ``X-LakeSync-Features`` sets its cursor to a push answer's serverHlc
    (LakeSync v1 does): it is answered the cursor it holds, or the point before its batch,
    never the head (docs/protocol.md §6)."""
    bob = token("bob")
    d1 = delta("INSERT", "r1", "alice", title="a")
    r = gateway.push(ALICE, "alice", [d1])  # never pulled: answered the point before its batch
    assert r.status_code == 200, r.text
    assert gateway.pull_page(ALICE, "alice", int(r.json()["serverHlc"]), evictions=False).json()[
        "deltas"] == [as_json(d1)]
    pulled = gateway.pull_page(ALICE, "alice", 0, evictions=False).json()
    d2, d3 = delta("INSERT", "r2", "bob", title="b"), delta("INSERT", "r3", "alice", title="c")
    assert gateway.push(bob, "bob", [d2]).status_code == 200
    r = gateway.push(ALICE, "alice", [d3])
    assert r.status_code == 200, r.text
    assert r.json()["serverHlc"] == pulled["serverHlc"]  # the cursor its pull gave it
    after = gateway.pull_page(ALICE, "alice", int(r.json()["serverHlc"]), evictions=False).json()
    assert after["deltas"] == [as_json(d2), as_json(d3)]  # bob's delta is not skipped
    r = gateway.push(ALICE, "alice", [d3], evictions=True)  # with the header: the head
    assert r.json()["serverHlc"] == after["serverHlc"]


def test_repush_is_accepted_but_applied_once(gateway: Gateway) -> None:
    d1 = delta("INSERT", "r1", "alice", title="a")
    gateway.push(ALICE, "alice", [d1])
    r = gateway.push(ALICE, "alice", [d1, d1])
    assert r.status_code == 200 and r.json()["accepted"] == 2 and r.json()["deltas"] == []
    assert len(gateway.pull_page(ALICE, "alice", 0).json()["deltas"]) == 1


def test_late_delta_reaches_a_client_whose_cursor_passed_it(gateway: Gateway) -> None:
    bob = token("bob")
    gateway.push(ALICE, "alice", [delta("INSERT", "r1", "alice", title="new")])
    replica = Replica()
    gateway.sync(bob, "bob", replica)
    late = delta("UPDATE", "r1", "alice", hlc=now_hlc(-60_000), title="old", note="late")
    gateway.push(ALICE, "alice", [late])
    gateway.sync(bob, "bob", replica)
    assert replica.rows() == {("todos", "r1"): {"title": "new", "note": "late"}}


def test_pull_pages_with_has_more(gateway: Gateway) -> None:
    deltas = [delta("INSERT", f"r{i}", "alice", n=i) for i in range(7)]
    gateway.push(ALICE, "alice", deltas)
    first = gateway.pull_page(ALICE, "alice", 0, limit=3).json()
    assert len(first["deltas"]) == 3 and first["hasMore"] is True
    replica = Replica()
    gateway.sync(ALICE, "alice", replica, limit=3)
    assert len(replica.rows()) == 7


def test_numeric_hlc_is_accepted(gateway: Gateway) -> None:
    d1 = delta("INSERT", "r1", "alice", title="a")
    wire = as_json(d1) | {"hlc": d1.hlc}
    r = gateway.http.post(
        "/v1/sync/gw1/push",
        json={"clientId": "alice", "deltas": [wire], "lastSeenHlc": 5},
        headers=auth(ALICE),
    )
    assert r.status_code == 200, r.text
    assert gateway.pull_page(ALICE, "alice", 0).json()["deltas"][0]["hlc"] == str(d1.hlc)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "VALIDATION_ERROR"),
        (b"[]", 400, "VALIDATION_ERROR"),
        (b'{"deltas": []}', 400, "VALIDATION_ERROR"),
        (b'{"clientId": 5, "deltas": []}', 400, "VALIDATION_ERROR"),
        (b'{"clientId": "alice", "deltas": {}}', 400, "VALIDATION_ERROR"),
        (b'{"clientId": "alice", "deltas": [{"op": "INSERT"}]}', 400, "VALIDATION_ERROR"),
        (b'{"clientId": "alice", "deltas": [], "lastSeenHlc": "x1"}', 400, "VALIDATION_ERROR"),
        (b'{"clientId": "alice", "deltas": [], "lastSeenHlc": 1.5}', 400, "VALIDATION_ERROR"),
        (b'{"clientId": "bob", "deltas": []}', 403, "FORBIDDEN"),
    ],
)
def test_push_rejects_malformed_bodies(
    gateway: Gateway, body: bytes, status: int, code: str
) -> None:
    r = gateway.http.post("/v1/sync/gw1/push", content=body, headers=auth(ALICE))
    error(r, status, code)


def _wire(**changes: Any) -> dict[str, Any]:
    return as_json(delta("INSERT", "r1", "alice", title="a")) | changes


@pytest.mark.parametrize(
    ("wire", "status", "code"),
    [
        (_wire(table="t; drop table x"), 422, "SCHEMA_ERROR"),
        (_wire(columns=[{"column": "a b", "value": 1}]), 422, "SCHEMA_ERROR"),
        (_wire(deltaId="0" * 64), 422, "SCHEMA_ERROR"),
        (_wire(op="UPSERT"), 400, "VALIDATION_ERROR"),
        (_wire(hlc="-1"), 400, "VALIDATION_ERROR"),
        (_wire(hlc=1.5), 400, "VALIDATION_ERROR"),
        (_wire(hlc=str(2**64)), 400, "VALIDATION_ERROR"),
        (_wire(rowId=""), 400, "VALIDATION_ERROR"),
        (_wire(rowId="r\x00x"), 400, "VALIDATION_ERROR"),
        (as_json(delta("INSERT", "r1", "bob", title="a")), 403, "FORBIDDEN"),
    ],
)
def test_push_rejects_bad_deltas_and_stores_nothing(
    gateway: Gateway, wire: dict[str, Any], status: int, code: str
) -> None:
    good = as_json(delta("INSERT", "ok", "alice", title="fine"))
    r = gateway.http.post(
        "/v1/sync/gw1/push",
        json={"clientId": "alice", "deltas": [good, wire]},
        headers=auth(ALICE),
    )
    error(r, status, code)
    assert gateway.pull_page(ALICE, "alice", 0).json()["deltas"] == []


@pytest.mark.parametrize(
    ("bad", "status", "code"),
    [
        ({"deltaId": "0" * 64}, 422, "SCHEMA_ERROR"),  # plain cells: the msgspec deltaId path
        ({"columns": [{"column": "n", "value": 1.5}], "deltaId": "0" * 64}, 422, "SCHEMA_ERROR"),
        ({"columns": [{"column": "n", "value": 10**400}]}, 400, "VALIDATION_ERROR"),
        (as_json(delta("INSERT", "r2", "bob", title="t2", n=2)), 403, "FORBIDDEN"),
    ],
)
def test_a_bad_delta_in_the_middle_refuses_the_whole_batch(
    gateway: Gateway, bad: dict[str, Any], status: int, code: str
) -> None:
    goods = [as_json(delta("INSERT", f"r{i}", "alice", title=f"t{i}", n=i)) for i in range(5)]
    batch = [*goods[:2], goods[2] | bad, *goods[3:]]
    body = {"clientId": "alice", "deltas": batch}
    r = gateway.http.post("/v1/sync/gw1/push", json=body, headers=auth(ALICE))
    error(r, status, code)
    assert "deltas[2]" in r.json()["error"]
    assert gateway.pull_page(ALICE, "alice", 0).json()["deltas"] == []
    # The same batch without its bad delta is stored whole.
    r = gateway.http.post(
        "/v1/sync/gw1/push", json={"clientId": "alice", "deltas": goods}, headers=auth(ALICE)
    )
    assert r.status_code == 200 and r.json()["accepted"] == 5
    pulled = gateway.pull_page(ALICE, "alice", 0).json()["deltas"]
    assert [d["deltaId"] for d in pulled] == [d["deltaId"] for d in goods]


@pytest.mark.parametrize("depth", [500, 990, 5000, 200_000])
def test_deeply_nested_values_are_400(gateway: Gateway, depth: int) -> None:
    value = "[" * depth + "]" * depth
    body = (
        '{"clientId":"alice","deltas":[{"op":"INSERT","table":"t","rowId":"r","clientId":"alice",'
        f'"columns":[{{"column":"c","value":{value}}}],"hlc":"{now_hlc()}","deltaId":"x"}}]}}'
    )
    r = gateway.http.post("/v1/sync/gw1/push", content=body, headers=auth(ALICE))
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "VALIDATION_ERROR"


def test_clock_drift_is_409(gateway: Gateway) -> None:
    r = gateway.push(ALICE, "alice", [delta("INSERT", "r1", "alice", hlc=now_hlc(60_000), x=1)])
    error(r, 409, "CLOCK_DRIFT")


def test_oversize_body_is_413(gateway: Gateway) -> None:
    big = delta("INSERT", "r1", "alice", blob="x" * (1024 * 1024))
    error(gateway.push(ALICE, "alice", [big]), 413, "VALIDATION_ERROR")


def test_too_many_deltas_is_400(tmp_path: Path) -> None:
    # A larger body cap isolates the count limit (10,001 real deltas exceed 1 MiB).
    settings = make_settings(tmp_path, max_body_bytes=8 * 1024 * 1024)
    with TestClient(create_app(settings)) as client:
        gw = Gateway(client)
        hlc = now_hlc()
        deltas = [delta("DELETE", f"r{i}", "alice", hlc=hlc) for i in range(10_001)]
        error(gw.push(ALICE, "alice", deltas), 400, "VALIDATION_ERROR")
        assert gw.push(ALICE, "alice", deltas[:10_000]).json()["accepted"] == 10_000


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ({"since": "abc"}, 400, "VALIDATION_ERROR"),
        ({"since": "-1"}, 400, "VALIDATION_ERROR"),
        ({"since": str(2**64)}, 400, "VALIDATION_ERROR"),
        ({"limit": "0"}, 400, "VALIDATION_ERROR"),
        ({"limit": "10001"}, 400, "VALIDATION_ERROR"),
        ({"limit": "ten"}, 400, "VALIDATION_ERROR"),
        ({"clientId": "bob"}, 403, "FORBIDDEN"),
        ({"source": "salesforce"}, 404, "NOT_FOUND"),
    ],
)
def test_pull_rejects_bad_queries(
    gateway: Gateway, query: dict[str, str], status: int, code: str
) -> None:
    error(gateway.http.get("/v1/sync/gw1/pull", params=query, headers=auth(ALICE)), status, code)


def _forged(**payload: Any) -> str:
    claims = {"sub": "alice", "gw": "gw1", "exp": int(time.time()) + 60} | payload
    return jwt.encode(claims, "wrong-secret-0123456789abcdef0123456", algorithm="HS256")


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "AUTH_ERROR"),
        ({"Authorization": "Basic abc"}, 401, "AUTH_ERROR"),
        ({"Authorization": "Bearer not-a-jwt"}, 401, "AUTH_ERROR"),
        ({"Authorization": f"Bearer {_forged()}"}, 401, "AUTH_ERROR"),
        (
            auth(jwt.encode({"sub": "alice", "gw": "gw1", "exp": 1}, SECRET, algorithm="HS256")),
            401,
            "AUTH_ERROR",
        ),
        (
            auth(jwt.encode({"sub": "alice", "gw": "gw1"}, SECRET, algorithm="HS256")),
            401,
            "AUTH_ERROR",
        ),
        (auth(token("alice", gw="gw2")), 403, "FORBIDDEN"),
    ],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/sync/gw1/pull"),
        ("POST", "/v1/sync/gw1/push"),
        ("GET", "/v1/sync/gw1/checkpoint"),
        ("GET", "/v1/sync/gw1/actions"),
    ],
)
def test_bad_tokens_are_refused(
    gateway: Gateway, method: str, path: str, headers: dict[str, str], status: int, code: str
) -> None:
    body = {"clientId": "alice", "deltas": []} if method == "POST" else None
    error(gateway.http.request(method, path, headers=headers, json=body), status, code)


def test_previous_secret_and_query_token_are_accepted(gateway: Gateway) -> None:
    import lakesync.tokens

    old = lakesync.tokens.mint_token(PREVIOUS_SECRET, "alice", "gw1")
    assert gateway.pull_page(old, "alice", 0).status_code == 200
    assert gateway.http.get("/v1/sync/gw1/pull", params={"token": ALICE}).status_code == 200


def test_gateways_are_isolated(gateway: Gateway) -> None:
    gateway.push(ALICE, "alice", [delta("INSERT", "r1", "alice", x=1)])
    other = token("alice", gw="gw2")
    assert gateway.pull_page(other, "alice", 0, gw="gw2").json()["deltas"] == []


def test_checkpoint_and_actions(gateway: Gateway) -> None:
    error(gateway.http.get("/v1/sync/gw1/checkpoint", headers=auth(ALICE)), 404, "NOT_FOUND")
    r = gateway.http.get("/v1/sync/gw1/actions", headers=auth(ALICE))
    assert r.status_code == 200 and r.json() == {"connectors": {}}
    body = {
        "clientId": "alice",
        "actions": [{"actionId": "a1", "connector": "crm", "actionType": "send", "params": {}}],
    }
    r = gateway.http.post("/v1/sync/gw1/action", json=body, headers=auth(ALICE))
    assert r.status_code == 200
    assert r.json()["results"][0]["actionId"] == "a1"
    assert r.json()["results"][0]["code"] == "NOT_FOUND"
    error(
        gateway.http.post("/v1/sync/gw1/action", json={"x": 1}, headers=auth(ALICE)),
        400,
        "VALIDATION_ERROR",
    )
    error(
        gateway.http.post(
            "/v1/sync/gw1/action", json=body | {"clientId": "bob"}, headers=auth(ALICE)
        ),
        403,
        "FORBIDDEN",
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/sync/gw1/push"),
        ("GET", "/sync/gw1/pull?since=5"),
        ("GET", "/admin/metrics/gw1"),
        ("DELETE", "/admin/connectors/gw1/x"),
    ],
)
def test_legacy_paths_redirect_permanently(gateway: Gateway, method: str, path: str) -> None:
    r = gateway.http.request(method, path, follow_redirects=False)
    assert r.status_code == 301
    assert r.headers["location"] == "/v1" + path


def test_unknown_route_and_method(gateway: Gateway) -> None:
    error(gateway.http.get("/v1/nope"), 404, "NOT_FOUND")
    r = gateway.http.put("/v1/sync/gw1/push", headers=auth(ALICE))
    assert r.status_code == 405 and r.json()["code"] == "VALIDATION_ERROR"


def test_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, rate_limit=0.01, rate_burst=2))) as c:
        gw = Gateway(c)
        assert gw.pull_page(ALICE, "alice", 0).status_code == 200
        assert gw.pull_page(ALICE, "alice", 0).status_code == 200
        r = gw.pull_page(ALICE, "alice", 0)
        error(r, 429, "RATE_LIMITED")
        assert int(r.headers["retry-after"]) >= 1
        assert gw.pull_page(token("bob"), "bob", 0).status_code == 200


def test_backpressure_answers_503_until_flushed(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, backpressure_bytes=10))) as c:
        gw = Gateway(c)
        assert gw.push(ALICE, "alice", [delta("INSERT", "r1", "alice", x=1)]).status_code == 200
        error(
            gw.push(ALICE, "alice", [delta("INSERT", "r2", "alice", x=2)]),
            503,
            "BACKPRESSURE_ERROR",
        )
        service = c.app.state.service
        service.store.mark_flushed(service.store.head())
        assert gw.push(ALICE, "alice", [delta("INSERT", "r2", "alice", x=2)]).status_code == 200


def test_request_id_is_echoed(gateway: Gateway) -> None:
    r = gateway.http.get("/health", headers={"X-Request-Id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    assert len(gateway.http.get("/health").headers["x-request-id"]) == 32
    assert len(gateway.http.get("/no/such/route").headers["x-request-id"]) == 32


def test_expired_token_error_names_expiry(gateway: Gateway) -> None:
    tok = jwt.encode(
        {"sub": "alice", "gw": "gw1", "exp": int(time.time()) - 5}, SECRET, algorithm="HS256"
    )
    r = gateway.pull_page(tok, "alice", 0)
    error(r, 401, "AUTH_ERROR")
    assert "expired" in r.json()["error"]
