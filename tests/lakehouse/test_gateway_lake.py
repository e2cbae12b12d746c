"""The gateway's lake jobs end to end: schemas registered on the gateway reach the pipeline.

A real ``python -m lakesync.api`` process with a short flush interval and a scheduled pipeline: a
table
registered only through the admin route (no ``lakesync.yaml`` anywhere) gets its
``analytics.<table>`` model from the scheduled ``lakesync pipeline run``, and a column added later
through the admin route flows through to the model on a later scheduled run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync.errors import NotFoundError
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.registry import registered_schemas
from lakesync.lakehouse.settings import LakeSettings
from lakesync.schema import parse_schema
from tests.api.helpers import auth, delta, token
from tests.gateway_process import ServerProcess, process_running
from tests.wire_json import as_json

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NOTES_V1 = {"table": "notes", "columns": [{"name": "body", "type": "string"}]}
NOTES_V2 = {"table": "notes", "columns": [
    {"name": "body", "type": "string"}, {"name": "stars", "type": "number"},
]}


def _eventually(check: Callable[[], Any], what: str, log: Path, timeout: float = 300.0) -> Any:
    """Poll ``check`` until it returns a truthy value; fail with the pipeline log otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1.0)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no pipeline.log)"
    pytest.fail(f"{what} did not happen within {timeout:.0f} s; pipeline.log:\n{tail}")


def _notes(settings: LakeSettings, columns: str) -> list[tuple[Any, ...]] | None:
    from lakesync.lakehouse.query import run_query

    try:
        result = run_query(
            settings, f"select row_id, {columns} from analytics.notes order by row_id"
        )
    except NotFoundError:  # the table is not there yet
        return None
    except Exception as exc:  # the column is not there yet
        if type(exc).__module__.startswith(("duckdb", "_duckdb")):
            return None
        raise
    return result.rows


def test_admin_registered_schema_reaches_the_scheduled_pipeline(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"LAKESYNC_FLUSH_INTERVAL": "1", "LAKESYNC_PIPELINE_INTERVAL": "2"}
    admin = auth(token("ops", role="admin"))
    alice = auth(token("alice"))
    with ServerProcess(data, env=env) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        r = http.post("/v1/admin/schema/gw1", json=NOTES_V1, headers=admin)
        assert r.status_code == 200, r.text
        first = [delta("INSERT", "n1", "alice", table="notes", body="hello"),
                 delta("INSERT", "n2", "alice", table="notes", body="bye")]
        r = http.post("/v1/sync/gw1/push", headers=alice,
                      json={"clientId": "alice", "deltas": [as_json(d) for d in first]})
        assert r.status_code == 200, r.text

        settings = LakeSettings.from_env(data, env={})
        log = data / "pipeline.log"
        rows = _eventually(lambda: _notes(settings, "body"), "analytics.notes", log)
        assert rows == [("n1", "hello"), ("n2", "bye")]
        assert registered_schemas(open_catalog(settings)) == [("gw1", parse_schema(NOTES_V1))]

        r = http.post("/v1/admin/schema/gw1", json=NOTES_V2, headers=admin)
        assert r.status_code == 200, r.text
        later = [delta("UPDATE", "n1", "alice", table="notes", stars=5)]
        r = http.post("/v1/sync/gw1/push", headers=alice,
                      json={"clientId": "alice", "deltas": [as_json(d) for d in later]})
        assert r.status_code == 200, r.text
        rows = _eventually(
            lambda: (got := _notes(settings, "body, stars")) and got[0][2] == 5 and got,
            "the new column stars in analytics.notes", log,
        )
        assert rows == [("n1", "hello", 5.0), ("n2", "bye", None)]
        worker = gw.children()
        assert worker, "the pipeline worker process is not running"
        # Graceful stop within ServerProcess's 30 s, a scheduled run in flight or not: the
        # whole shutdown ran (exit 0) and stopped the warm worker.
        assert gw.stop() == 0
        assert not [pid for pid in worker if process_running(pid)]


def test_scheduled_runs_count_secondary_failures_on_the_gateways_metrics(tmp_path: Path) -> None:
    """The scheduled pipeline ships in the worker process; its failed writes to a fan-out
    secondary (MariaDB on a closed port) reach the gateway's own ``/metrics``."""
    import psycopg

    from tests.conftest import drop_pg_database, fresh_pg_database

    url = fresh_pg_database()
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "destinations:\n"
        f"  app:\n    kind: postgres\n    url: {url}\n    gateway: gw1\n"
        "    secondaries: [down]\n"
        "  down:\n    kind: mysql\n    url: mysql://root@127.0.0.1:1/x\n    gateway: gw1\n"
    )
    data = tmp_path / "data"
    env = {"LAKESYNC_FLUSH_INTERVAL": "1", "LAKESYNC_PIPELINE_INTERVAL": "2"}
    line = 'lakesync_destination_secondary_failures_total{destination="app",secondary="down"}'
    try:
        with ServerProcess(data, env=env, config=config) as gw, \
                httpx.Client(base_url=gw.url, timeout=30) as http:
            r = http.post("/v1/admin/schema/gw1", json=NOTES_V1,
                          headers=auth(token("ops", role="admin")))
            assert r.status_code == 200, r.text
            assert line not in http.get("/metrics").text
            notes = [delta("INSERT", "n1", "alice", table="notes", body="hello")]
            r = http.post("/v1/sync/gw1/push", headers=auth(token("alice")),
                          json={"clientId": "alice", "deltas": [as_json(d) for d in notes]})
            assert r.status_code == 200, r.text

            def counted() -> float:
                for text in http.get("/metrics").text.splitlines():
                    if text.startswith(line):
                        return float(text.split()[-1])
                return 0.0

            assert _eventually(counted, "the secondary failure on /metrics",
                               data / "pipeline.log") >= 1
            with psycopg.connect(url) as conn:  # the primary got the row all the same
                rows = conn.execute("select row_id, body from notes").fetchall()
            assert rows == [("n1", "hello")]
            assert gw.stop() == 0  # SIGTERM runs the orderly shutdown
    finally:
        drop_pg_database(url)
