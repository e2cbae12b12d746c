"""The console's routes without a browser: its page and assets under a self-only policy, sign-in
with an admin token in the body setting an HttpOnly SameSite=Strict cookie, and its data refused
without that cookie (JSON error bodies, never a 500)."""

from __future__ import annotations

import time
from pathlib import Path

from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.api.headers import CONSOLE_CSP
from lakesync.api.services.console import SESSION_COOKIE
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from tests.api.helpers import Gateway, delta, make_settings, token


def test_console_serves_its_assets_and_signs_in_with_a_cookie(tmp_path: Path) -> None:
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    settings = make_settings(tmp_path, console_sample_s=0.2)
    with TestClient(create_app(settings, store=store)) as client:
        page = client.get("/console")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert page.headers["content-security-policy"] == CONSOLE_CSP.decode()
        for asset in ("console.js", "console.css", "vendor/uplot.min.js", "vendor/uplot.min.css"):
            r = client.get(f"/console/assets/{asset}")
            assert r.status_code == 200, asset
            assert f"/console/assets/{asset}" in page.text
        assert client.get("/console/assets/../app.py").status_code == 404

        assert client.get("/console/session").json() == {"signed_in": False}
        refused = client.get("/console/api/status")
        assert refused.status_code == 401 and refused.json()["code"] == "AUTH_ERROR"
        assert client.get("/console/api/events").status_code == 401
        bad = client.post("/console/session", json={"token": "not-a-token"})
        assert bad.status_code == 401 and bad.json()["code"] == "AUTH_ERROR"
        user = client.post("/console/session", json={"token": token("alice")})
        assert user.status_code == 403
        as_json = {"content-type": "application/json"}
        assert client.post("/console/session", content=b"[1]", headers=as_json).status_code == 400

        signed = client.post("/console/session", json={"token": token("root", role="admin")})
        assert signed.status_code == 204
        cookie = signed.headers["set-cookie"]
        assert cookie.startswith(f"{SESSION_COOKIE}=")
        assert "HttpOnly" in cookie and "Path=/console" in cookie
        assert "samesite=strict" in cookie.lower()

        gateway = Gateway(client)
        schema = {"table": "todos", "columns": [{"name": "t", "type": "string"}]}
        assert gateway.admin("POST", "/v1/admin/schema/gw1", json=schema).status_code == 200
        pushed = gateway.push(token("alice"), "alice", [delta("INSERT", "r1", "alice", t="a")])
        assert pushed.status_code == 200
        assert client.get("/console/session").json() == {"signed_in": True}
        status = client.get("/console/api/status").json()
        assert [g["gateway"] for g in status["gateways"]] == ["gw1"]
        detail = client.get("/console/api/gateways/gw1").json()
        assert detail["tables"][0]["table"] == "todos" and detail["tables"][0]["rows"] == 1
        assert client.get("/console/api/gateways/bad%20id").status_code == 400

        assert client.delete("/console/session").status_code == 204
        assert client.get("/console/api/status").status_code == 401


def test_the_sampler_keeps_rates_and_counts_per_gateway(tmp_path: Path) -> None:
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    # No background sample (nobody signed in; then one an hour): the test takes its own.
    settings = make_settings(tmp_path, console_sample_s=3600)
    with TestClient(create_app(settings, store=store)) as client:
        gateway = Gateway(client)
        console = client.app.state.console
        alice = token("alice")
        first = [delta("INSERT", "r0", "alice", t="a")]
        assert gateway.push(alice, "alice", first).status_code == 200
        with client.portal() as portal:
            portal.call(console.sample)
            for i in range(1, 4):
                rows = [delta("INSERT", f"r{i}", "alice", t="a")]
                assert gateway.push(alice, "alice", rows).status_code == 200
            portal.call(console.sample)
        points = console.history.series()["gw1"]
        assert [p.pushes for p in points[-2:]] == [1, 4]
        assert points[-1].deltas == 4 and points[-1].push_rate > 0


def test_the_gateway_samples_only_while_someone_is_signed_in(tmp_path: Path) -> None:
    """A sample asks every destination for its watermarks: an unwatched gateway takes none."""
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    settings = make_settings(tmp_path, console_sample_s=0.05)
    with TestClient(create_app(settings, store=store)) as client:
        console = client.app.state.console
        schema = {"table": "todos", "columns": [{"name": "t", "type": "string"}]}
        assert Gateway(client).admin("POST", "/v1/admin/schema/gw1", json=schema).status_code == 200
        time.sleep(1.0)  # twenty sampling periods
        assert console.history.series() == {}
        signed = client.post("/console/session", json={"token": token("root", role="admin")})
        assert signed.status_code == 204
        deadline = time.monotonic() + 60
        while not console.history.series() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert console.history.series(), "no sample after sign-in"
