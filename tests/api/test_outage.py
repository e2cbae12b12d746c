"""A store outage answers 503 (retryable), never 500."""

from __future__ import annotations

from pathlib import Path

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.postgres import PostgresHotLog
from tests.api.helpers import auth, make_settings, now_hlc, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.wire_json import as_json


@pytest.mark.postgres
def test_store_outage_is_503_not_500(tmp_path: Path) -> None:
    require_postgres()
    schema = fresh_pg_schema()
    store = PostgresHotLog(PG_DSN, HLC(), schema=schema)
    try:
        with TestClient(create_app(make_settings(tmp_path), store=store)) as client:
            store.close()  # the pool is gone: every store call fails
            r = client.get("/v1/sync/gw1/pull", headers=auth(token("alice")))
            assert r.status_code == 503 and r.json()["code"] == "BACKPRESSURE_ERROR"
            delta = RowDelta.create("INSERT", "todos", "r1", "alice", {"n": 1}, now_hlc())
            body = {"clientId": "alice", "deltas": [as_json(delta)]}
            r = client.post("/v1/sync/gw1/push", json=body, headers=auth(token("alice")))
            assert r.status_code == 503 and r.json()["code"] == "BACKPRESSURE_ERROR"
            r = client.get("/ready")
            # The driver's error (it may name the store's host and user) stays in the log.
            assert r.status_code == 503, r.text
            assert r.json() == {"error": "the hot-log store is unreachable",
                                "code": "BACKPRESSURE_ERROR",
                                "requestId": r.headers["X-Request-Id"]}
    finally:
        drop_pg_schema(schema)
