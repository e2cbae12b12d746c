"""Secrets in every DSN form by every output of a real gateway: destinations and connectors
declared with a password in userinfo, in the query string (``password=``, ``sslpassword=``), in
libpq key=value (bare and quoted) and in a ``${VAR}`` / ``${file:…}`` value; none of them may
show in ``GET /v1/admin/status?all=true``, ``/console/api/status``, ``lakesync status`` (text
and ``--json``), ``GET /v1/admin/connectors/{gw}`` (and a connector's status) or the gateway's
log. The destinations point at ports nobody listens on, so each is reported unreachable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.helpers import SECRET
from tests.gateway_process import ROOT, ServerProcess, free_port
from tests.netns import wait_for

pytestmark = pytest.mark.slow

SECRETS = {
    "userinfo": "UserInfo-S3cret-1",
    "query": "Query-S3cret-2",
    "sslpassword": "SslKey-S3cret-3",
    "env": "FromEnv-S3cret-4",
    "keyvalue": "KeyValue-S3cret-5",
    "quoted": "Quoted S3cret 6",
    "file": "FromFile-S3cret-7",
    "registered": "Registered-S3cret-8",
}
ENV_VAR = "LAKESYNC_TEST_APP_NAME"


def _config(tmp_path: Path) -> Path:
    secret_file = tmp_path / "app-name.txt"
    secret_file.write_text(SECRETS["file"] + "\n", encoding="utf-8")
    p = [free_port() for _ in range(8)]
    db = {"source_table": "orders", "table": "orders", "key": ["id"],
          "cursor_column": "changed_at", "interval": 3600}
    destinations = {
        "d_userinfo": f"postgresql://u:{SECRETS['userinfo']}@127.0.0.1:{p[0]}/db",
        "d_query": f"postgresql://u@127.0.0.1:{p[1]}/db?password={SECRETS['query']}",
        "d_ssl": f"postgresql://u@127.0.0.1:{p[2]}/db?sslmode=disable"
                 f"&sslpassword={SECRETS['sslpassword']}",
        # A ${VAR} where no pattern looks: its messages name the variable, never its value.
        "d_env": f"postgresql://u@127.0.0.1:{p[3]}/db?application_name=${{{ENV_VAR}}}",
    }
    config = {
        "gateways": {"shop": {"schemas": [
            {"table": "orders", "columns": [{"name": "total", "type": "number"}]}
        ]}},
        "destinations": {
            name: {"kind": "postgres", "url": url, "gateway": "shop"}
            for name, url in destinations.items()
        },
        "connectors": {
            "c_query": {"kind": "postgres", "gateway": "shop", **db,
                        "dsn": f"postgresql://u@127.0.0.1:{p[4]}/db?password={SECRETS['query']}"},
            "c_keyvalue": {"kind": "postgres", "gateway": "shop", **db,
                           "dsn": f"host=127.0.0.1 port={p[5]} user=u "
                                  f"password={SECRETS['keyvalue']} dbname=db"},
            "c_quoted": {"kind": "postgres", "gateway": "shop", **db,
                         "dsn": f"host=127.0.0.1 port={p[6]} user=u "
                                f"password='{SECRETS['quoted']}' dbname=db"},
            "c_file": {"kind": "postgres", "gateway": "shop", **db,
                       "dsn": f"host=127.0.0.1 port={p[7]} user=u dbname=db "
                              f"application_name=${{file:{secret_file}}}"},
        },
        "server": {"flush_interval": 0},
    }
    path = tmp_path / "lakesync.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return path


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One gateway for the table: its destinations unreachable, its connectors failing (and one
    more registered at runtime)."""
    tmp_path = tmp_path_factory.mktemp("dsn-outputs")
    config = _config(tmp_path)
    with ServerProcess(tmp_path / "data", env={ENV_VAR: SECRETS["env"]}, config=config) as gw:
        with _admin(gw) as http:
            registered = {
                "name": "c_registered", "kind": "postgres", "source_table": "orders",
                "table": "orders", "key": ["id"], "cursor_column": "changed_at",
                "interval": 3600, "dsn": f"postgresql://u@127.0.0.1:{free_port()}/db"
                                        f"?sslpassword={SECRETS['registered']}",
            }
            r = http.post("/v1/admin/connectors/shop", json=registered)
            assert r.status_code == 200, r.text

            def connectors_failing() -> bool:
                body = http.get("/v1/admin/status").json()
                return sum(bool(c["failing"]) for c in body["gateways"][0]["connectors"]) == 5

            wait_for("every connector's first poll to fail", connectors_failing, timeout=60)
        yield gw


def _admin(gw: ServerProcess) -> httpx.Client:
    token = gw.token("ops", "shop", role="admin")
    return httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _leaks(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text]


def _cli_status(gw: ServerProcess, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LAKESYNC_JWT_SECRET": SECRET}
    env.pop("LAKESYNC_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "lakesync.cli.main", "status", "--url", gw.url, "--gw", "shop",
         *args],
        capture_output=True, env=env, timeout=120, check=False, text=True, cwd=gw.data_dir,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # the destinations are failing
    assert "failing: shop: destination d_query unreachable" in done.stderr, done.stderr
    return done.stdout + done.stderr


def _status_route(gw: ServerProcess) -> str:
    with _admin(gw) as http:
        r = http.get("/v1/admin/status", params={"all": "true"})
    assert r.status_code == 200, r.text
    body = r.json()
    errors = {d["name"]: d["error"] for d in body["gateways"][0]["destinations"]}
    assert "?password=***" in errors["d_query"] and "u:***@" in errors["d_userinfo"], errors
    assert "sslpassword=***" in errors["d_ssl"]
    assert f"application_name=${{{ENV_VAR}}}" in errors["d_env"]  # named, not its value
    assert len(body["failing"]) == 9, body["failing"]  # 4 destinations, 5 connectors
    return r.text


def _console(gw: ServerProcess) -> str:
    with httpx.Client(base_url=gw.url, timeout=60) as browser:
        signed = browser.post(
            "/console/session", json={"token": gw.token("ops", "shop", role="admin")},
            headers={"Origin": gw.url, "Sec-Fetch-Site": "same-origin"},
        )
        assert signed.status_code == 204, signed.text
        r = browser.get("/console/api/status")
    assert r.status_code == 200 and "d_query" in r.text, r.text
    return r.text


def _connectors_route(gw: ServerProcess) -> str:
    with _admin(gw) as http:
        listed = http.get("/v1/admin/connectors/shop")
        assert listed.status_code == 200, listed.text
        statuses = [http.get(f"/v1/admin/connectors/shop/{name}/status").text
                    for name in ("c_keyvalue", "c_quoted", "c_registered")]
    dsns = {c["name"]: c["dsn"] for c in listed.json()["connectors"]}
    assert dsns["c_keyvalue"].endswith("password=*** dbname=db")
    assert "password='***'" in dsns["c_quoted"] and "?password=***" in dsns["c_query"]
    assert "?sslpassword=***" in dsns["c_registered"]
    assert "application_name=${file:" in dsns["c_file"]  # the reference itself is shown
    return "\n".join([listed.text, *statuses])


def _gateway_log(gw: ServerProcess) -> str:
    with _admin(gw) as http:
        assert http.get("/v1/admin/status").status_code == 200  # logs what it cannot read
    log = gw.log_path.read_text(errors="replace")
    assert "d_env" in log
    return log


OUTPUTS: dict[str, Callable[[ServerProcess], str]] = {
    "GET /v1/admin/status?all=true": _status_route,
    "/console/api/status": _console,
    "lakesync status": _cli_status,
    "lakesync status --json": lambda gw: _cli_status(gw, "--json"),
    "GET /v1/admin/connectors/{gw}": _connectors_route,
    "the gateway's log": _gateway_log,
}


@pytest.mark.parametrize("output", OUTPUTS)
def test_no_dsn_form_shows_its_secret(gateway: ServerProcess, output: str) -> None:
    shown = OUTPUTS[output](gateway)
    assert not _leaks(shown), shown[-3000:]
