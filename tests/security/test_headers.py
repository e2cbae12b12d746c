"""Security headers on every HTTP response, through the real app."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.api.headers import DOCS_CSP, SECURITY_HEADERS, security_headers_middleware
from tests.api.helpers import Gateway, auth, make_settings, token


def _has_security_headers(headers: Any, csp: bytes) -> None:
    for name, value in SECURITY_HEADERS.items():
        expected = csp if name == b"content-security-policy" else value
        assert headers.get(name.decode()) == expected.decode(), name


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/health", 200),
        ("GET", "/metrics", 200),
        ("GET", "/docs/openapi.json", 200),
        ("GET", "/v1/sync/gw1/pull?clientId=alice", 200),
        ("GET", "/v1/sync/gw1/pull", 401),  # an error reply
        ("GET", "/nowhere", 404),  # unrouted
        ("DELETE", "/health", 405),
    ],
)
def test_every_response_has_the_security_headers(
    gateway: Gateway, method: str, path: str, status: int
) -> None:
    headers = auth(token("alice")) if "clientId" in path else {}
    r = gateway.http.request(method, path, headers=headers)
    assert r.status_code == status
    _has_security_headers(r.headers, SECURITY_HEADERS[b"content-security-policy"])


def test_the_docs_page_may_load_only_its_pinned_assets(gateway: Gateway) -> None:
    r = gateway.http.get("/docs")
    assert r.status_code == 200 and "https://cdn.jsdelivr.net/npm/swagger-ui-dist@" in r.text
    _has_security_headers(r.headers, DOCS_CSP)


def test_docs_can_be_turned_off(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path, docs=False))) as client:
        assert client.get("/docs").status_code == 404
        assert client.get("/docs/openapi.json").status_code == 404
        assert client.get("/health").status_code == 200


def test_headers_a_route_sets_are_kept() -> None:
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"Content-Security-Policy", b"sandbox"),
                    (b"content-type", b"text/html"),
                ],
            }
        )

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(security_headers_middleware(app)({"type": "http"}, None, send))
    headers = dict(sent[0]["headers"])
    assert headers[b"Content-Security-Policy"] == b"sandbox"
    assert b"content-security-policy" not in headers
    assert headers[b"x-frame-options"] == b"DENY"
