"""Hardening of a real ``lakesync up`` process: malformed claims and cursors are 4xx,
credentials never reach the log, WebSocket slots are shared fairly, docs/headers/metrics knobs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from lakesync.wsframes import encode_pull
from tests.api.helpers import SECRET, auth, token
from tests.gateway_process import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One gateway process with default settings, shared by the tests that only read."""
    server = ServerProcess(tmp_path_factory.mktemp("hardening") / "data").start()
    try:
        yield server
    finally:
        server.stop()


def _signed(**payload: Any) -> str:
    """A validly signed token over any payload (PyJWT's encoder refuses some claim types)."""
    body = {"sub": "alice", "gw": "gw1", "exp": int(time.time()) + 600, **payload}
    return jwt.api_jws.encode(json.dumps(body).encode(), SECRET, algorithm="HS256")


def _close_code(sock: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed):
        sock.recv(timeout=10)
    return sock.close_code


@pytest.mark.parametrize("role", [["admin"], {"admin": True}], ids=["list", "object"])
def test_malformed_role_claim_is_401_not_500(served: ServerProcess, role: object) -> None:
    tok = _signed(role=role)
    for path in ("/v1/sync/gw1/pull?clientId=alice", "/v1/admin/metrics/gw1"):
        r = httpx.get(f"{served.url}{path}", headers=auth(tok))
        assert r.status_code == 401, r.text
        assert r.json()["code"] == "AUTH_ERROR" and "role" in r.json()["error"]
    with connect(f"{served.ws_url}/v1/sync/gw1/ws?token={tok}") as sock:
        assert _close_code(sock) == 4401


@pytest.mark.parametrize("since", [2**63, 2**64 - 1])
def test_cursor_past_any_ingest_hlc_is_400_not_500(served: ServerProcess, since: int) -> None:
    tok = token("alice")
    r = httpx.get(
        f"{served.url}/v1/sync/gw1/pull",
        params={"since": str(since), "clientId": "alice"},
        headers=auth(tok),
    )
    assert r.status_code == 400, r.text
    assert r.json() == {"error": r.json()["error"], "code": "VALIDATION_ERROR",
                        "requestId": r.headers["X-Request-Id"]}
    assert "since" in r.json()["error"]
    with connect(f"{served.ws_url}/v1/sync/gw1/ws?token={tok}") as sock:
        sock.send(encode_pull("alice", since, 10))
        assert _close_code(sock) == 4400
    ok = httpx.get(
        f"{served.url}/v1/sync/gw1/pull",
        params={"since": str(2**63 - 1), "clientId": "alice"},
        headers=auth(tok),
    )
    assert ok.status_code == 200 and ok.json()["deltas"] == []


def test_no_credential_reaches_the_log(tmp_path: Path) -> None:
    """uvicorn logs each WebSocket handshake with its query string: the token must be masked."""
    server = ServerProcess(tmp_path / "data", {"LAKESYNC_CATALOG_PASSWORD": "catalog-pa55word"})
    server.start()
    tok = token("alice")
    try:
        with connect(f"{server.ws_url}/v1/sync/gw1/ws?clientId=alice&token={tok}") as sock:
            sock.send(encode_pull("alice", 0, 10))
            sock.recv(timeout=10)
        bad = httpx.get(f"{server.url}/v1/sync/gw1/pull?token={tok}", headers=auth("x" + tok))
        assert bad.status_code == 401
    finally:
        server.stop()
    log = server.log_path.read_text()
    assert "WebSocket /v1/sync/gw1/ws?clientId=alice&token=***" in log
    for secret in (tok, tok.split(".")[2], SECRET, "catalog-pa55word"):
        assert secret not in log


def _pull_reply(sock: ClientConnection, sub: str) -> None:
    sock.send(encode_pull(sub, 0, 1))
    sock.recv(timeout=10)


def test_websocket_slots_are_shared_and_zero_means_no_cap(tmp_path: Path) -> None:
    env = {
        "LAKESYNC_WS_MAX_CONNECTIONS": "0",
        "LAKESYNC_WS_MAX_CONNECTIONS_PER_GATEWAY": "3",
        "LAKESYNC_WS_MAX_CONNECTIONS_PER_CLIENT": "2",
    }

    def url(sub: str, gw: str = "gw1") -> str:
        return f"{server.ws_url}/v1/sync/{gw}/ws?token={token(sub, gw)}"

    server = ServerProcess(tmp_path / "data", env)
    with server, connect(url("alice")) as a1, connect(url("alice")) as a2:
        with connect(url("alice")) as a3:  # one client: at most 2
            assert _close_code(a3) == 1013 and "alice" in (a3.close_reason or "")
        with connect(url("bob")) as b:
            for sock, sub in ((a1, "alice"), (a2, "alice"), (b, "bob")):
                _pull_reply(sock, sub)
            with connect(url("carol")) as c:  # one gateway: at most 3
                assert _close_code(c) == 1013
            with connect(url("carol", "gw2")) as other:  # other tenants still get in
                _pull_reply(other, "carol")


def test_security_headers_and_docs_on_by_default(served: ServerProcess) -> None:
    for path in ("/health", "/docs", "/v1/sync/gw1/pull"):
        r = httpx.get(f"{served.url}{path}")
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert httpx.get(f"{served.url}/docs").status_code == 200


def test_docs_off_and_metrics_without_gateway_ids(tmp_path: Path) -> None:
    env = {"LAKESYNC_DOCS": "false", "LAKESYNC_METRICS_GATEWAY_LABELS": "false"}
    with ServerProcess(tmp_path / "data", env) as server:
        assert httpx.get(f"{server.url}/docs").status_code == 404
        assert httpx.get(f"{server.url}/docs/openapi.json").status_code == 404
        tenant = "acme_private_tenant"
        pulled = httpx.get(
            f"{server.url}/v1/sync/{tenant}/pull",
            params={"clientId": "alice"},
            headers=auth(token("alice", tenant)),
        )
        assert pulled.status_code == 200, pulled.text
        exposition = httpx.get(f"{server.url}/metrics").text
        assert tenant not in exposition
        assert "lakesync_pull_total 1.0" in exposition.splitlines()
        admin = auth(token("root", tenant, "admin"))
        per_gw = httpx.get(f"{server.url}/v1/admin/metrics/{tenant}", headers=admin).json()
        assert per_gw["pulls"] == 1  # the admin route still counts per gateway
