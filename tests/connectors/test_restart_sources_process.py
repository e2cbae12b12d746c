"""Real gateway processes, killed (SIGKILL) in the middle of ingesting from Salesforce, from a
database table (cursor and diff strategies, PostgreSQL and MariaDB), from PostgreSQL change
capture, from CloudWatch Logs and from BigQuery, then started again: the gateway's rows equal
the source, every row was inserted once and no change was stored twice (the log holds exactly
one delta per source change)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lakesync.connectors.salesforce import OBJECTS
from tests.connectors.conftest import require_cloudwatch
from tests.connectors.fake_http import Reply, Request
from tests.connectors.fake_salesforce import FakeSalesforce
from tests.connectors.test_database import SourceDb
from tests.connectors.test_gateway_restart_process import (
    every_delta,
    kill_mid_poll_and_restart,
    settled,
)
from tests.connectors.test_pg_cdc import logical_dsn  # noqa: F401 - the fixture
from tests.gateway_process import ServerProcess

pytestmark = pytest.mark.slow


def declare(tmp_path: Path, name: str, body: dict[str, Any]) -> Path:
    """A lakesync.yaml declaring one connector (JSON is YAML)."""
    import json

    config = tmp_path / "lakesync.yaml"
    config.write_text(json.dumps({"connectors": {name: {"gateway": "gw1", **body}}}))
    return config


def live_rows(deltas: list[dict[str, Any]], table: str) -> dict[str, dict[str, Any]]:
    """The rows the deltas leave (one writer, in log order: later values win)."""
    rows: dict[str, dict[str, Any]] = {}
    for d in deltas:
        if d["table"] != table:
            continue
        if d["op"] == "DELETE":
            rows.pop(d["rowId"], None)
        else:
            row = rows.setdefault(d["rowId"], {})
            row.update({c["column"]: c["value"] for c in d["columns"]})
    return rows


def inserted_once(deltas: list[dict[str, Any]]) -> None:
    inserts = Counter((d["table"], d["rowId"]) for d in deltas if d["op"] == "INSERT")
    assert set(inserts.values()) == {1}, inserts.most_common(3)


class SlowSalesforce(FakeSalesforce):
    """Each query page takes a moment, so a poll is long enough to be killed in."""

    def _query(self, req: Request) -> Reply:
        time.sleep(0.2)
        return super()._query(req)

    def _more(self, req: Request) -> Reply:
        time.sleep(0.2)
        return super()._more(req)


def test_salesforce_killed_mid_poll(tmp_path: Path) -> None:
    with SlowSalesforce() as org:
        for i in range(1200):
            org.add("Account", Name=f"Acme {i}", NumberOfEmployees=i)
        for i in range(300):
            org.add("Contact", LastName=f"Doe {i}")
        login = {k: v for k, v in org.login.items() if k != "grant_type"}
        body = {"kind": "salesforce", "interval": 3600, "login_url": org.url, **login}
        config = declare(tmp_path, "crm", body | {"page_size": 200, "chunk_rows": 50})
        with ServerProcess(tmp_path / "gw", config=config) as gw:
            kill_mid_poll_and_restart(gw, "crm", 200, 1500)
            deltas = every_delta(gw)
        inserted_once(deltas)
        assert len(deltas) == 1500  # one delta per record: nothing stored twice
        for obj in ("Account", "Contact"):
            table = OBJECTS[obj][0]
            rows = live_rows(deltas, table)
            assert {
                r: v["name"] if obj == "Account" else v["last_name"] for r, v in rows.items()
            } == {
                r: f["Name"] if obj == "Account" else f["LastName"]
                for r, f in org.records[obj].items()
            }


ROWS = 3000


@pytest.fixture(
    params=[
        pytest.param(("postgres", "cursor"), marks=pytest.mark.postgres),
        pytest.param(("postgres", "diff"), marks=pytest.mark.postgres),
        pytest.param(("mysql", "cursor"), marks=pytest.mark.mysql),
        pytest.param(("mysql", "diff"), marks=pytest.mark.mysql),
    ],
    ids="-".join,
)
def table(request: pytest.FixtureRequest) -> Iterator[tuple[SourceDb, str]]:
    kind, strategy = request.param
    db = SourceDb(kind)
    for start in range(0, ROWS, 500):
        values = ", ".join(
            f"({i}, 'eu', 'row {i}', {i}.5, true, '{{}}', '2026-01-01 00:00:00')"
            for i in range(start, start + 500)
        )
        db.run(f"INSERT INTO {db.table} VALUES {values}")
    yield db, strategy
    db.drop()


def test_a_database_table_killed_mid_poll(tmp_path: Path, table: tuple[SourceDb, str]) -> None:
    db, strategy = table
    body = {"kind": db.kind, "interval": 3600, "dsn": db.dsn, "source_table": db.table}
    body |= {"table": "items", "key": ["id", "region"], "chunk_rows": 5, "strategy": strategy}
    if strategy == "cursor":
        body["cursor_column"] = "id"
    with ServerProcess(tmp_path / "gw", config=declare(tmp_path, "db", body)) as gw:
        kill_mid_poll_and_restart(gw, "db", 300, ROWS)
        deltas = every_delta(gw)
        inserted_once(deltas)
        assert len(deltas) == ROWS
        if strategy == "diff":  # deletions and updates found by the next poll, once each
            db.run(f"DELETE FROM {db.table} WHERE id < 100")
            db.run(f"UPDATE {db.table} SET name = 'renamed' WHERE id >= {ROWS - 50}")
            gw.restart()
            settled(gw, "db")
            deltas = every_delta(gw)
            assert len(deltas) == ROWS + 150
    rows = live_rows(deltas, "items")
    assert {r: v["name"] for r, v in rows.items()} == {
        r: v["name"] for r, v in db.expected().items()
    }


@pytest.mark.postgres
def test_change_capture_killed_mid_stream(tmp_path: Path, logical_dsn: str) -> None:  # noqa: F811
    with psycopg.connect(logical_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS cdc_restart")
        conn.execute("CREATE TABLE cdc_restart (id integer PRIMARY KEY, name text)")
        conn.execute(
            "INSERT INTO cdc_restart SELECT i, 'first ' || i FROM generate_series(1, 200) i"
        )
        body = {"kind": "postgres_cdc", "interval": 3600, "dsn": logical_dsn}
        body |= {"slot": "restart_slot", "tables": {"public.cdc_restart": "items"}}
        body |= {"chunk_rows": 20}
        try:
            with ServerProcess(tmp_path / "gw", config=declare(tmp_path, "cdc", body)) as gw:
                settled(gw, "cdc")  # the first load (and the slot)
                gw.stop()
                # 3,000 inserts in 30 transactions, then 500 of those rows deleted.
                for start in range(1000, 4000, 100):
                    conn.execute(
                        "INSERT INTO cdc_restart SELECT i, 'new ' || i"
                        f" FROM generate_series({start}, {start + 99}) i"
                    )
                conn.execute("DELETE FROM cdc_restart WHERE id BETWEEN 1000 AND 1499")
                gw.start()
                kill_mid_poll_and_restart(gw, "cdc", 300, 3500)
                deltas = every_delta(gw)
            expected = {str(i): n for i, n in conn.execute("SELECT id, name FROM cdc_restart")}
        finally:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE slot_name = 'restart_slot'"
            )
            conn.execute("DROP TABLE cdc_restart")
    inserted_once(deltas)
    assert Counter(d["op"] for d in deltas) == {"INSERT": 3200, "DELETE": 500}
    assert {r: v["name"] for r, v in live_rows(deltas, "items").items()} == expected


def test_cloudwatch_logs_killed_mid_poll(tmp_path: Path) -> None:
    """The cursor is stored per chunk (page): the restart resumes at the next page, and the
    pages it reads again store nothing."""
    from tests.connectors.test_cloudwatch_logs import LogGroup, LogsProxy

    group = LogGroup(require_cloudwatch())
    group.put("web-1", [{"level": "ERROR", "n": i} for i in range(600)])
    group.put("web-2", [f"plain {i}" for i in range(200)])
    with LogsProxy(group.endpoint) as proxy:
        proxy.delay = 0.5  # a poll long enough to be killed in, on a loaded machine too
        declared = {"kind": "cloudwatch_logs", "interval": 3600, "log_groups": [group.name]}
        declared |= {"endpoint": proxy.url, "region": "us-east-1", "parse": "json"}
        declared |= {"access_key_id": "test", "secret_access_key": "test", "chunk_rows": 20}
        with ServerProcess(tmp_path / "gw", config=declare(tmp_path, "logs", declared)) as gw:
            kill_mid_poll_and_restart(gw, "logs", 200, 800)
            resumed_at = proxy.calls
            deltas = every_delta(gw)
            cursor = settled(gw, "logs")["cursor"]
    inserted_once(deltas)
    assert len(deltas) == 800  # one delta per event: nothing stored twice
    rows = live_rows(deltas, "logs")
    assert sum(1 for r in rows.values() if r.get("level") == "ERROR") == 600
    assert next(iter(cursor["reads"].values())).keys() == {"high"}  # the read finished
    # 40 pages of 20 (plus the last, empty one): resumed at the page after the last stored
    # chunk, where a restart from the start would have read the ~10 pages before the kill again.
    assert resumed_at <= 800 / 20 + 3


def test_bigquery_killed_mid_poll(tmp_path: Path) -> None:
    from tests.connectors.test_bigquery import Dataset, ledger

    ds = Dataset()
    try:
        ds.run(
            f"CREATE TABLE {ds.name}.ledger (id INT64, cost_centre STRING,"
            " amount NUMERIC(12, 2), booked_at TIMESTAMP)"
        )
        ledger(ds, 600)
        body = {"kind": "bigquery", "interval": 3600, "url": ds.url, "table": "ledger"}
        body |= {"source_table": f"{ds.name}.ledger", "key": ["id"], "chunk_rows": 20}
        body |= {"cursor_column": "booked_at"}
        with ServerProcess(tmp_path / "gw", config=declare(tmp_path, "bq", body)) as gw:
            kill_mid_poll_and_restart(gw, "bq", 100, 600)
            deltas = every_delta(gw)
    finally:
        ds.drop()
    inserted_once(deltas)
    assert len(deltas) == 600
    assert len(live_rows(deltas, "ledger")) == 600
