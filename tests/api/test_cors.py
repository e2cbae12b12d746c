"""Web apps on other origins (lakesync/api/cors.py): the sync API answers their preflights and
its responses, errors included, let the allowed origins read them; other origins are refused,
on HTTP and on the WebSocket handshake; the console, admin routes, probes and docs never send a
CORS header, whatever ``server.cors_origins`` says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.exceptions import WebSocketDisconnect
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.api.cors import MAX_AGE_S
from lakesync.wsframes import decode_server_frame, encode_pull, encode_push
from tests.api.helpers import Gateway, auth, delta, make_settings, token
from tests.wire_json import as_json

APP = "https://app.example.com"
DEV = "http://localhost:5173"
EVIL = "https://evil.example"
OWN = "http://testserver.local"  # the test client's base URL: the gateway's own origin

SYNC_ROUTES = [  # (method, path) of every route of the sync API
    ("POST", "/v1/sync/gw1/push"),
    ("GET", "/v1/sync/gw1/pull"),
    ("GET", "/v1/sync/gw1/checkpoint"),
    ("GET", "/v1/sync/gw1/schemas"),
    ("POST", "/v1/sync/gw1/action"),
    ("GET", "/v1/sync/gw1/actions"),
]
COOKIE_AND_ADMIN_ROUTES = [  # routes no page elsewhere may read
    ("GET", "/console/"),
    ("GET", "/console/session"),
    ("POST", "/console/session"),
    ("GET", "/console/api/status"),
    ("GET", "/v1/admin/status"),
    ("GET", "/v1/admin/metrics/gw1"),
    ("POST", "/v1/admin/sync-rules/gw1"),
    ("POST", "/admin/flush/gw1"),  # unprefixed: redirects
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/docs/openapi.json"),
]


@pytest.fixture
def listed(tmp_path: Path) -> Iterator[Gateway]:
    """A gateway whose operator lists two origins."""
    settings = make_settings(tmp_path, cors_origins=(APP, DEV), rate_limit=1.0, rate_burst=3)
    with TestClient(create_app(settings)) as client:
        yield Gateway(client)


def _preflight(gateway: Gateway, path: str, origin: str, method: str = "POST") -> Any:
    return gateway.http.options(path, headers={
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization,content-type,x-lakesync-features",
    })


def _cors_headers(r: Any) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k.lower().startswith("access-control-")}


def _words(value: str) -> set[str]:
    return {w.strip().lower() for w in value.split(",")}


@pytest.mark.parametrize(("method", "path"), SYNC_ROUTES)
@pytest.mark.parametrize("origin", [APP, DEV])
def test_preflights_of_the_sync_api_are_answered_for_listed_origins(
    listed: Gateway, method: str, path: str, origin: str
) -> None:
    r = _preflight(listed, path, origin, method)
    assert r.status_code == 204, r.text
    assert r.headers["access-control-allow-origin"] == origin
    assert method.lower() in _words(r.headers["access-control-allow-methods"])
    allowed = _words(r.headers["access-control-allow-headers"])
    assert {"authorization", "content-type", "x-lakesync-features", "x-lakesync-outbox",
            "x-lakesync-dead-letters", "x-request-id"} <= allowed
    assert r.headers["access-control-max-age"] == str(MAX_AGE_S)
    assert "origin" in _words(r.headers["vary"])
    assert "access-control-allow-credentials" not in r.headers  # tokens, never cookies


def test_responses_and_errors_are_readable_by_a_listed_origin(listed: Gateway) -> None:
    alice = {**auth(token("alice")), "Origin": APP}
    pushed = listed.http.post("/v1/sync/gw1/push", headers=alice, json={
        "clientId": "alice", "deltas": []})
    pulled = listed.http.get("/v1/sync/gw1/pull?clientId=alice", headers=alice)
    unauthenticated = listed.http.get("/v1/sync/gw1/pull", headers={"Origin": APP})
    no_checkpoint = listed.http.get("/v1/sync/gw1/checkpoint", headers=alice)
    unrouted = listed.http.get("/v1/sync/gw1/nowhere", headers=alice)
    assert [r.status_code for r in (pushed, pulled, unauthenticated, no_checkpoint, unrouted)] \
        == [200, 200, 401, 404, 404]
    for r in (pushed, pulled, unauthenticated, no_checkpoint, unrouted):
        assert r.headers["access-control-allow-origin"] == APP
        exposed = _words(r.headers["access-control-expose-headers"])
        assert {"x-checkpoint-hlc", "x-request-id", "retry-after"} <= exposed
        assert "access-control-allow-credentials" not in r.headers
    # The spec's error body, which the page can now read.
    assert unauthenticated.json()["code"] == "AUTH_ERROR"
    assert unauthenticated.json()["requestId"] == unauthenticated.headers["x-request-id"]


def test_a_rate_limited_page_reads_retry_after(listed: Gateway) -> None:
    alice = {**auth(token("alice")), "Origin": DEV}
    replies = [listed.http.get("/v1/sync/gw1/pull?clientId=alice", headers=alice)
               for _ in range(5)]
    limited = [r for r in replies if r.status_code == 429]
    assert limited, [r.status_code for r in replies]
    assert limited[0].headers["access-control-allow-origin"] == DEV
    assert "retry-after" in _words(limited[0].headers["access-control-expose-headers"])
    assert int(limited[0].headers["retry-after"]) >= 1


@pytest.mark.parametrize(("method", "path"), SYNC_ROUTES)
def test_an_origin_outside_the_list_is_refused(listed: Gateway, method: str, path: str) -> None:
    preflight = _preflight(listed, path, EVIL, method)
    assert preflight.status_code == 403
    assert _cors_headers(preflight) == {}
    r = listed.http.request(method, path, headers={**auth(token("alice")), "Origin": EVIL})
    assert r.status_code == 403
    assert r.json()["code"] == "FORBIDDEN"
    assert "server.cors_origins" in r.json()["error"] and EVIL in r.json()["error"]
    assert _cors_headers(r) == {}


def test_a_refused_origin_stores_nothing(listed: Gateway) -> None:
    alice = auth(token("alice"))
    body = {"clientId": "alice", "deltas": [as_json(delta("INSERT", "r1", "alice", title="x"))]}
    r = listed.http.post("/v1/sync/gw1/push", json=body, headers={**alice, "Origin": EVIL})
    assert r.status_code == 403
    pulled = listed.http.get("/v1/sync/gw1/pull?clientId=alice", headers=alice)
    assert pulled.status_code == 200 and pulled.json()["deltas"] == []


@pytest.mark.parametrize("origin", [None, OWN])
def test_non_browser_and_same_origin_requests_pass_untouched(
    listed: Gateway, origin: str | None
) -> None:
    headers = auth(token("alice")) | ({} if origin is None else {"Origin": origin})
    r = listed.http.get("/v1/sync/gw1/pull?clientId=alice", headers=headers)
    assert r.status_code == 200
    assert _cors_headers(r) == {}


def test_any_origin_by_default(gateway: Gateway) -> None:
    preflight = _preflight(gateway, "/v1/sync/gw1/push", EVIL)
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    r = gateway.http.get("/v1/sync/gw1/pull?clientId=alice",
                         headers={**auth(token("alice")), "Origin": "null"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers


def test_no_origin_when_the_list_is_empty(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, cors_origins=()))) as client:
        assert _preflight(Gateway(client), "/v1/sync/gw1/push", APP).status_code == 403
        r = client.get("/v1/sync/gw1/pull?clientId=a", headers={**auth(token("a")), "Origin": OWN})
        assert r.status_code == 200  # its own pages (/docs) still work


@pytest.mark.parametrize(("method", "path"), COOKIE_AND_ADMIN_ROUTES)
@pytest.mark.parametrize("listed_only", [False, True])
def test_console_admin_probes_and_docs_never_send_cors_headers(
    tmp_path: Path, method: str, path: str, listed_only: bool
) -> None:
    origins = (APP,) if listed_only else ("*",)
    with TestClient(create_app(make_settings(tmp_path, cors_origins=origins))) as client:
        admin = auth(token("root", role="admin"))
        preflight = client.options(path, headers={
            "Origin": APP, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization,content-type"})
        r = client.request(method, path, headers={**admin, "Origin": APP},
                           follow_redirects=False)
    assert _cors_headers(preflight) == {}, preflight.headers
    assert _cors_headers(r) == {}, r.headers


def _handshake_close(gateway: Gateway, origin: str, tok: str) -> int:
    with gateway.http.websocket_connect(
        f"/v1/sync/gw1/ws?token={tok}", headers={"Origin": origin}
    ) as sock, pytest.raises(WebSocketDisconnect) as info:
        sock.receive_bytes()
    return info.value.code


def test_a_websocket_from_an_origin_outside_the_list_is_closed_1008(listed: Gateway) -> None:
    assert _handshake_close(listed, EVIL, token("alice")) == 1008
    # Before the token is looked at: a page elsewhere learns nothing of it.
    assert _handshake_close(listed, EVIL, "garbage") == 1008
    assert _handshake_close(listed, APP, "garbage") == 4401


@pytest.mark.parametrize("origin", [APP, DEV, OWN, None])
def test_a_websocket_from_a_listed_origin_or_none_syncs(
    listed: Gateway, origin: str | None
) -> None:
    headers = {} if origin is None else {"Origin": origin}
    with listed.http.websocket_connect(
        f"/v1/sync/gw1/ws?token={token('alice')}", headers=headers
    ) as sock:
        sock.send_bytes(encode_push("alice", [delta("INSERT", "r1", "alice", title="x")]))
        assert decode_server_frame(sock.receive_bytes()).server_hlc > 0


def test_an_empty_gateways_websocket_replies_are_never_empty(gateway: Gateway) -> None:
    """A gateway that stores nothing yet answers a pull (and an empty push) with a frame the
    TypeScript client takes for an answer (at least two bytes; here server_hlc written out)."""
    with gateway.http.websocket_connect(f"/v1/sync/gw1/ws?token={token('alice')}") as sock:
        sock.send_bytes(encode_pull("alice", 0, 100))
        pulled = sock.receive_bytes()
        sock.send_bytes(encode_push("alice", []))
        pushed = sock.receive_bytes()
    for frame in (pulled, pushed):
        assert len(frame) >= 9
        reply = decode_server_frame(frame)
        assert not reply.broadcast and reply.deltas == [] and reply.server_hlc == 0
