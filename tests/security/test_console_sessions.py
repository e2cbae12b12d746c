"""Console sessions against a real gateway process: a session lasts only while its admin token
verifies (it ends when the token expires, and when the gateway's secret changes), and a sign-in
is taken only from the console's own page (same origin, a JSON body) with a token whose gateway
id the admin routes would accept."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from lakesync.api.services.console import SESSION_COOKIE
from tests.gateway_process import ServerProcess
from tests.netns import wait_for

pytestmark = pytest.mark.slow

_GW = "shop"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("console") / "data") as gw:
        yield gw


def _admin(gw: ServerProcess, **claims: Any) -> str:
    return gw.token("operator", _GW, role="admin", **claims)


def _sign_in(gw: ServerProcess, token: str,
             headers: Mapping[str, str | None] | None = None) -> httpx.Response:
    """``POST /console/session`` as the console's page sends it, ``headers`` added, overriding
    or (None) left out."""
    page = {"content-type": "application/json", "origin": gw.url, "sec-fetch-site": "same-origin"}
    sent = {k: v for k, v in {**page, **(headers or {})}.items() if v is not None}
    body = json.dumps({"token": token}).encode()
    return httpx.post(f"{gw.url}/console/session", content=body, headers=sent, timeout=30)


def _console_status(gw: ServerProcess, session: str) -> int:
    cookie = {"cookie": f"{SESSION_COOKIE}={session}"}
    return httpx.get(f"{gw.url}/console/api/status", headers=cookie, timeout=30).status_code


def _admin_status(gw: ServerProcess, token: str) -> httpx.Response:
    auth = {"authorization": f"Bearer {token}"}
    return httpx.get(f"{gw.url}/v1/admin/status", headers=auth, timeout=30)


def _refused(reply: httpx.Response, status: int, code: str) -> None:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert body["code"] == code and body["error"] and "requestId" in body
    assert SESSION_COOKIE not in reply.headers.get("set-cookie", "")


def test_a_same_origin_json_sign_in_opens_a_session(gateway: ServerProcess) -> None:
    signed = _sign_in(gateway, _admin(gateway))
    assert signed.status_code == 204, signed.text
    assert _console_status(gateway, signed.cookies[SESSION_COOKIE]) == 200
    # The console's page itself: no Sec-Fetch-Site from an older browser, no Origin from curl.
    plain = _sign_in(gateway, _admin(gateway), {"sec-fetch-site": None, "origin": None})
    assert plain.status_code == 204, plain.text


def test_a_session_ends_when_its_token_expires(gateway: ServerProcess) -> None:
    token = _admin(gateway, ttl_s=3)
    signed = _sign_in(gateway, token)
    assert signed.status_code == 204, signed.text
    session = signed.cookies[SESSION_COOKIE]
    cookie = {"cookie": f"{SESSION_COOKIE}={session}"}
    assert _console_status(gateway, session) == 200
    with httpx.stream("GET", f"{gateway.url}/console/api/events", headers=cookie,
                      timeout=30) as live:
        assert live.status_code == 200
        wait_for("the admin token to expire",
                 lambda: _admin_status(gateway, token).status_code == 401, timeout=30)
        assert _console_status(gateway, session) == 401
        for _ in live.iter_bytes():  # the live stream ends with its session (no read timeout)
            pass
    state = httpx.get(f"{gateway.url}/console/session", headers=cookie, timeout=30).json()
    assert state == {"signed_in": False}
    assert httpx.get(f"{gateway.url}/console/api/events", headers=cookie,
                     timeout=30).status_code == 401


def test_a_new_jwt_secret_ends_every_session(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data") as gw:
        signed = _sign_in(gw, _admin(gw))
        assert signed.status_code == 204, signed.text
        session = signed.cookies[SESSION_COOKIE]
        assert _console_status(gw, session) == 200
        gw.extra_env["LAKESYNC_JWT_SECRET"] = "another-secret-0123456789abcdef01234567"
        gw.restart()
        assert _console_status(gw, session) == 401
        assert _sign_in(gw, _admin(gw)).status_code == 204  # a token of the new secret signs in


def test_a_sign_in_that_is_not_json_is_refused(gateway: ServerProcess) -> None:
    for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None):
        _refused(_sign_in(gateway, _admin(gateway), {"content-type": media}),
                 415, "VALIDATION_ERROR")


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1"])
def test_a_sign_in_from_another_origin_is_refused(gateway: ServerProcess, origin: str) -> None:
    _refused(_sign_in(gateway, _admin(gateway), {"origin": origin}), 403, "FORBIDDEN")
    # The login CSRF as a page elsewhere sends it: a text/plain "simple" request.
    forged = {"origin": origin, "content-type": "text/plain", "sec-fetch-site": "cross-site"}
    reply = _sign_in(gateway, _admin(gateway), forged)
    assert reply.status_code in (403, 415) and SESSION_COOKIE not in reply.cookies


@pytest.mark.parametrize("site", ["cross-site", "same-site", "none"])
def test_a_sign_in_that_the_browser_marks_cross_site_is_refused(
    gateway: ServerProcess, site: str
) -> None:
    reply = _sign_in(gateway, _admin(gateway), {"sec-fetch-site": site, "origin": None})
    _refused(reply, 403, "FORBIDDEN")


def test_a_token_with_a_bad_gateway_id_is_refused_as_on_the_admin_routes(
    gateway: ServerProcess,
) -> None:
    now = int(time.time())
    claims = {"sub": "operator", "gw": "../x", "role": "admin", "iat": now, "exp": now + 600}
    token = jwt.encode(claims, gateway.secret, algorithm="HS256")
    admin = _admin_status(gateway, token)
    assert admin.status_code == 400, admin.text
    _refused(_sign_in(gateway, token), admin.status_code, admin.json()["code"])
