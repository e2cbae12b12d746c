"""Error bodies tell clients a stable code, a short message and the request id, never the
infrastructure behind the gateway: a real gateway process whose declared source cannot be
reached answers 502 without its DSN or the driver's error, which go to the (redacted) log."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from tests.api.helpers import auth, token
from tests.gateway_process import ServerProcess

pytestmark = pytest.mark.slow

# Where the unreachable sources point: every part of them is something a client must not learn.
SECRET_BITS = ("leakuser", "s3cretpw", "no_such_db_for_leak", "55432", "53306", "127.0.0.1")


def test_a_failing_source_pull_names_no_dsn_and_carries_the_request_id(tmp_path: Path) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text(yaml.safe_dump({
        "gateways": {"gw1": {"schemas": [
            {"table": "contacts", "columns": [{"name": "name", "type": "string"}]}]}},
        "destinations": {
            "crm": {"kind": "postgres", "gateway": "gw1",
                    "url": "postgresql://leakuser:s3cretpw@127.0.0.1:55432/no_such_db_for_leak"},
            "shop": {"kind": "mysql", "gateway": "gw1",
                     "url": "mysql://leakuser:s3cretpw@127.0.0.1:53306/no_such_db_for_leak"},
        },
    }), encoding="utf-8")
    with ServerProcess(tmp_path / "data", config=config) as server:
        for source in ("crm", "shop"):
            rid = f"trace-{source}-1"
            r = httpx.get(
                f"{server.url}/v1/sync/gw1/pull",
                params={"source": source, "since": "0", "clientId": "alice"},
                headers={**auth(token("alice")), "X-Request-Id": rid},
            )
            assert r.status_code == 502, r.text
            body = r.json()
            assert set(body) == {"error", "code", "requestId"}, body
            assert body["code"] == "DESTINATION_ERROR" and body["requestId"] == rid
            assert r.headers["X-Request-Id"] == rid
            assert not [bit for bit in SECRET_BITS if bit in r.text], r.text
            assert len(body["error"]) < 120, body
        # Every other error body carries the request id too (a fresh one when none came in).
        r = httpx.get(f"{server.url}/v1/sync/gw1/pull", params={"source": "nope"},
                      headers=auth(token("alice")))
        assert r.status_code == 404 and r.json()["requestId"] == r.headers["X-Request-Id"]
        r = httpx.get(f"{server.url}/v1/sync/gw1/pull")
        assert r.status_code == 401 and r.json()["requestId"] == r.headers["X-Request-Id"]
        server.stop()
        lines = [json.loads(line) for line in server.log_path.read_text().splitlines()
                 if line.startswith("{")]
    # The operator finds the details under the request id, the password masked.
    for source in ("crm", "shop"):
        found = [ln["msg"] for ln in lines if ln.get("request_id") == f"trace-{source}-1"]
        detail = [m for m in found if "no_such_db_for_leak" in m or "cannot connect" in m]
        assert detail, found
        assert not any("s3cretpw" in m for m in found), found
