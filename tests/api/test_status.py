"""``GET /v1/admin/status``: the hot log, landing, pipeline history, destinations read live,
connectors, clients and refusals, and ``failing`` naming what fails (real PostgreSQL)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.api.lake import record_pipeline_run
from lakesync.api.services.status import record_landing_flush
from lakesync.client import LakeSyncClient
from lakesync.destination_specs import DestinationSpec
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.worker import RunReply
from lakesync.status import Shipment
from tests.api.helpers import Gateway, auth, delta, make_settings, token
from tests.gateway_process import free_port, serve_in_thread

SCHEMA = {"table": "todos", "columns": [{"name": "title", "type": "string"}]}


def _status(gateway: Gateway, query: str = "", tok: str | None = None) -> dict[str, Any]:
    r = gateway.http.get(
        f"/v1/admin/status{query}", headers=auth(tok or token("root", role="admin"))
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.postgres
def test_status_reads_destinations_live_and_names_an_unreachable_one(
    tmp_path: Path, pg_url: str
) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    destinations = {
        "warehouse": DestinationSpec("postgres", pg_url, "gw1", name="warehouse"),
        "stopped": DestinationSpec("postgres", closed, "gw1", tables=["todos"], name="stopped"),
    }
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    settings = make_settings(tmp_path, destinations=destinations)
    with TestClient(create_app(settings, store=store)) as client:
        gateway = Gateway(client)
        assert gateway.admin("POST", "/v1/admin/schema/gw1", json=SCHEMA).status_code == 200
        alice = token("alice")
        rows = [delta("INSERT", f"r{i}", "alice", title="t") for i in range(3)]
        assert gateway.push(alice, "alice", rows).status_code == 200
        refused = gateway.push(alice, "alice", [delta("INSERT", "x", "alice", colour="red")])
        assert refused.status_code == 422
        body = _status(gateway)

    (gw,) = body["gateways"]
    assert gw["gateway"] == "gw1"
    assert gw["hot_log"]["entries"] == 3 and gw["hot_log"]["unflushed_bytes"] > 0
    assert gw["landing"]["last_flush_at"] is None and gw["landing"]["lag"]["deltas"] == 3
    assert gw["landing"]["lag"]["oldest_age_s"] >= 0
    by_name = {d["name"]: d for d in gw["destinations"]}
    warehouse = by_name["warehouse"]
    assert warehouse["error"] is None
    assert warehouse["tables"] == [
        {"table": "todos", "watermark": None, "lag": warehouse["lag"]}
    ]
    assert warehouse["lag"]["deltas"] == 3  # never shipped: every delta of the table
    stopped = by_name["stopped"]
    assert stopped["error"] and stopped["tables"] == []
    assert body["failing"] == gw["failing"]
    assert len(body["failing"]) == 1 and "destination stopped unreachable" in body["failing"][0]
    assert [c["client_id"] for c in gw["clients"]] == ["alice"]
    assert gw["clients"][0]["last_seen_at"] is not None
    assert body["refusals"]["contract"] == 1


def test_status_shows_recorded_runs_flushes_reports_and_sockets(tmp_path: Path) -> None:
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    with TestClient(create_app(make_settings(tmp_path), store=store)) as client:
        gateway = Gateway(client)
        alice = token("alice")
        pushed = gateway.push(alice, "alice", [delta("INSERT", "r1", "alice", t="a")])
        assert pushed.status_code == 200
        head = store.head()
        store.mark_flushed(head)
        record_landing_flush(store, head)
        started = time.time() - 5
        record_pipeline_run(store, started, RunReply(
            ok=True, rows_merged=1, elapsed_s=4.0, position=head,
            shipments=[Shipment("warehouse", "todos", 1)],
        ))
        record_pipeline_run(store, started + 4, RunReply(ok=False, error="dbt: model todos failed"))
        # A client reports its outbox and dead letters on a pull; it holds a socket open too.
        r = client.get(
            "/v1/sync/gw1/pull?since=0",
            headers={**auth(alice), "X-LakeSync-Outbox": "7", "X-LakeSync-Dead-Letters": "2"},
        )
        assert r.status_code == 200
        with client.websocket_connect(f"/v1/sync/gw1/ws?token={token('bob')}"):
            body = _status(gateway, "?all=true")

    (gw,) = body["gateways"]
    assert gw["landing"]["lag"] == {"deltas": 0, "capped": False, "oldest_age_s": None}
    assert gw["landing"]["last_flush_at"] is not None
    assert gw["landing"]["flushed_position"] == str(head)
    runs = gw["pipeline"]["runs"]
    assert [r["ok"] for r in runs] == [False, True]  # newest first
    assert runs[1]["rows_merged"] == 1 and runs[1]["position"] == str(head)
    assert gw["pipeline"]["freshness_s"] >= 0 and gw["pipeline"]["lag"]["deltas"] == 0
    assert body["failing"] == ["gw1: last pipeline run failed: dbt: model todos failed"]
    clients = {c["client_id"]: c for c in gw["clients"]}
    assert clients["alice"]["pending_outbox"] == 7 and clients["alice"]["dead_letters"] == 2
    assert clients["bob"]["connections"] == 1


def test_status_needs_an_admin_token(gateway: Gateway) -> None:
    for headers, status in [
        ({}, 401),
        (auth(token("alice")), 403),
        (auth("not-a-token"), 401),
    ]:
        r = gateway.http.get("/v1/admin/status", headers=headers)
        assert r.status_code == status, r.text
        assert r.json()["code"] in {"AUTH_ERROR", "FORBIDDEN"}
    other = gateway.http.get(
        "/v1/admin/status/gw1", headers=auth(token("root", gw="gw2", role="admin"))
    )
    assert other.status_code == 403
    # A gateway nothing is declared or stored for: 404, not a status saying all is well.
    for path, gw in [("/v1/admin/status", "nope"), ("/v1/admin/status/nope", "nope")]:
        r = gateway.http.get(path, headers=auth(token("root", gw=gw, role="admin")))
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", r.text
    assert gateway.admin("POST", "/v1/admin/schema/gw2", gw="gw2", json=SCHEMA).status_code == 200
    assert _status(gateway, tok=token("root", gw="gw2", role="admin"))["gateways"][0][
        "gateway"
    ] == "gw2"


def test_status_is_in_the_openapi_document(gateway: Gateway) -> None:
    doc = gateway.http.get("/docs/openapi.json").json()
    assert "/v1/admin/status" in doc["paths"]
    assert "StatusResponse" in doc["components"]["schemas"]


def test_the_python_client_reports_its_outbox_and_dead_letters(tmp_path: Path) -> None:
    store = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    with serve_in_thread(create_app(make_settings(tmp_path), store=store)) as url:
        admin = auth(token("root", role="admin"))
        assert httpx.post(f"{url}/v1/admin/schema/gw1", json=SCHEMA, headers=admin).is_success
        # The replica knows a column the gateway does not: that write is refused for good.
        local = {"table": "todos", "columns": [*SCHEMA["columns"],
                                               {"name": "colour", "type": "string"}]}
        with LakeSyncClient(str(tmp_path / "a.db"), url=url, gateway_id="gw1",
                            token=token("alice"), schemas=[local]) as client:
            client.upsert("todos", "r1", {"title": "ok"})
            client.upsert("todos", "r2", {"title": "no", "colour": "red"})
            client.sync()
            client.sync()  # reports what the last one left: one dead letter, nothing pending
            assert len(client.dead_letters()) == 1
        body = httpx.get(f"{url}/v1/admin/status", headers=admin, timeout=30).json()
    (alice,) = body["gateways"][0]["clients"]
    assert (alice["client_id"], alice["pending_outbox"], alice["dead_letters"]) == ("alice", 0, 1)
