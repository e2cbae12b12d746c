"""Adapter-sourced pull: ``GET /v1/sync/{gw}/pull?source=NAME`` serves the rows of a declared
PostgreSQL table (real server) through a gateway app, as deltas in the pull format, paged by
``synced_at`` and filtered by the client's sync rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.config import GatewayConfig
from lakesync.delta import RowDelta
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import Destination, typed_change
from lakesync.lakehouse.catalog import lake_catalog
from lakesync.rules import parse_rules, rules_to_wire
from lakesync.schema import parse_schema
from lakesync.sources import source_client_id
from tests.api.helpers import auth, make_settings, now_hlc, token
from tests.destinations.conftest import _drop, open_fresh
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

SCHEMA = parse_schema({"table": "contacts", "columns": [
    {"name": "owner", "type": "string"},
    {"name": "name", "type": "string"},
    {"name": "score", "type": "number"},
    {"name": "tags", "type": "json"},
]})
COLUMNS = [(c.name, c.type) for c in SCHEMA.columns]
RULES = parse_rules({"version": 1, "buckets": [{
    "name": "mine", "tables": [], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
}]})


@pytest.fixture
def crm() -> Iterator[Destination]:
    """A PostgreSQL ``contacts`` table in the docs/protocol.md §11 layout: three change sets (three
    distinct ``synced_at`` instants), one soft delete."""
    dest, schema = open_fresh("postgres")
    layout = dest.layout("contacts", COLUMNS)
    dest.ensure_table(layout)
    dest.apply_changes(layout, [
        typed_change(layout, "a1", {"owner": "alice", "name": "Ann", "score": 1.5,
                                    "tags": {"vip": True}}),
        typed_change(layout, "b1", {"owner": "bob", "name": "Ben"}),
    ])
    dest.apply_changes(layout, [typed_change(layout, "a2", {"owner": "alice", "name": "Al"})])
    dest.apply_changes(layout, [
        typed_change(layout, "b2", {"owner": "bob", "name": "Bea"}),
        typed_change(layout, "a3", {"owner": "alice", "name": "gone"}),
    ])
    dest.apply_changes(layout, [typed_change(layout, "a3", None)])
    try:
        yield dest
    finally:
        dest.close()
        _drop("postgres", schema)


def gateway(tmp_path: Path, dest: Destination, rules: Any = None) -> TestClient[Any]:
    spec = DestinationSpec("postgres", dest.spec.url, "gw1", name="crm")
    settings = make_settings(
        tmp_path, gateways={"gw1": GatewayConfig("gw1", [SCHEMA], rules)},
        destinations={"crm": spec},
    )
    return TestClient(create_app(settings))


def pull_all(client: TestClient[Any], tok: str, sub: str, limit: int) -> tuple[
    list[list[dict[str, Any]]], int
]:
    """Every page until hasMore is false, and the final cursor."""
    pages: list[list[dict[str, Any]]] = []
    since = "0"
    for _ in range(100):
        r = client.get("/v1/sync/gw1/pull", headers=auth(tok), params={
            "source": "crm", "since": since, "clientId": sub, "limit": str(limit)})
        assert r.status_code == 200, r.text
        body = r.json()
        pages.append(body["deltas"])
        assert int(body["serverHlc"]) >= int(since)
        since = body["serverHlc"]
        if not body["hasMore"]:
            return pages, int(since)
    raise AssertionError("the source pull never finished")


def summary(pages: list[list[dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (d["op"], d["rowId"], {c["column"]: c["value"] for c in d["columns"]})
        for page in pages for d in page
    ]


def test_rows_arrive_as_deltas_paged_by_synced_at(tmp_path: Path, crm: Destination) -> None:
    with gateway(tmp_path, crm) as client:
        tok = token("admin1", role="admin")
        pages, cursor = pull_all(client, tok, "admin1", limit=1)
        # limit 1: each page ends at an instant's end (the first change set holds two rows);
        # a source holds current state: a3, deleted since, comes once, as its DELETE.
        assert [[d["rowId"] for d in p] for p in pages] == [["a1", "b1"], ["a2"], ["b2"], ["a3"]]
        assert pages[0][0] == pages[0][0] | {
            "op": "INSERT", "table": "contacts", "clientId": source_client_id("crm"),
        }
        assert summary(pages)[0] == ("INSERT", "a1", {
            "owner": "alice", "name": "Ann", "score": 1.5, "tags": {"vip": True}})
        assert summary(pages)[-1] == ("DELETE", "a3", {})
        # Nothing new: an empty page at the same cursor.
        r = client.get("/v1/sync/gw1/pull", headers=auth(tok),
                       params={"source": "crm", "since": str(cursor)})
        assert r.json() == {"deltas": [], "serverHlc": str(cursor), "hasMore": False}
        # A later change to the source is the only thing the next pull brings.
        layout = crm.layout("contacts", COLUMNS)
        crm.apply_changes(layout, [typed_change(layout, "b1", {"owner": "bob", "name": "B."})])
        later, _ = pull_all_from(client, tok, cursor)
        assert summary(later) == [("INSERT", "b1", {"owner": "bob", "name": "B.", "score": None,
                                                    "tags": None})]


def pull_all_from(
    client: TestClient[Any], tok: str, since: int
) -> tuple[list[list[dict[str, Any]]], int]:
    r = client.get("/v1/sync/gw1/pull", headers=auth(tok),
                   params={"source": "crm", "since": str(since)})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["hasMore"] is False
    return [body["deltas"]], int(body["serverHlc"])


def test_sync_rules_give_each_client_only_its_rows(tmp_path: Path, crm: Destination) -> None:
    with gateway(tmp_path, crm, RULES) as client:
        alice, _ = pull_all(client, token("alice"), "alice", limit=100)
        assert [(op, row) for op, row, _ in summary(alice)] == [
            ("INSERT", "a1"), ("INSERT", "a2"), ("DELETE", "a3")]
        bob, bob_cursor = pull_all(client, token("bob"), "bob", limit=1)
        assert [(op, row) for op, row, _ in summary(bob)] == [("INSERT", "b1"), ("INSERT", "b2")]
        assert all(cells.get("owner") in ("bob", None) for _, _, cells in summary(bob))
        # bob's cursor passed alice's later rows too: nothing more for him.
        _, again = pull_all_from(client, token("bob"), bob_cursor)
        assert again == bob_cursor


def test_relational_rules_read_the_gateways_merged_state(
    tmp_path: Path, crm: Destination
) -> None:
    """A subquery of a source pull's rules reads the gateway's own tables (the hot log): carol
    leads alice, so she sees alice's contacts, as of her pull."""
    team = parse_schema({"table": "team", "columns": [
        {"name": "lead", "type": "string"}, {"name": "member", "type": "string"}]})
    rules = parse_rules({"version": 1, "buckets": [{"name": "led", "tables": ["contacts"],
        "filters": [{"column": "owner", "op": "in", "value": {
            "table": "team", "select": "member",
            "where": [{"column": "lead", "op": "eq", "value": "jwt:sub"}]}}]}]})
    spec = DestinationSpec("postgres", crm.spec.url, "gw1", name="crm", tables=["contacts"])
    settings = make_settings(
        tmp_path, gateways={"gw1": GatewayConfig("gw1", [SCHEMA, team], rules)},
        destinations={"crm": spec},
    )
    with TestClient(create_app(settings)) as client:
        carol, _ = pull_all(client, token("carol"), "carol", limit=100)
        assert summary(carol) == []
        body = {"clientId": "root", "deltas": [as_json(RowDelta.create(
            "INSERT", "team", "t1", "root", {"lead": "carol", "member": "alice"}, now_hlc()))]}
        ok = client.post("/v1/sync/gw1/push", json=body, headers=auth(token("root", role="admin")))
        assert ok.status_code == 200, ok.text
        carol, _ = pull_all(client, token("carol"), "carol", limit=100)
        assert [(op, row) for op, row, _ in summary(carol)] == [
            ("INSERT", "a1"), ("INSERT", "a2"), ("DELETE", "a3")]


def test_unknown_source_is_404_with_the_error_body(tmp_path: Path, crm: Destination) -> None:
    with gateway(tmp_path, crm) as client:
        r = client.get("/v1/sync/gw1/pull", headers=auth(token("alice")),
                       params={"source": "nope"})
        assert r.status_code == 404
        body = r.json()
        assert body["code"] == "NOT_FOUND" and "unknown pull source 'nope'" in body["error"]
        assert "crm" in body["error"]  # names the declared sources
        r = client.get("/v1/sync/gw2/pull", headers=auth(token("alice", "gw2")),
                       params={"source": "crm"})  # another gateway's source
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


@pytest.mark.slow
def test_a_gateway_process_serves_its_declared_source(tmp_path: Path, crm: Destination) -> None:
    """``python -m lakesync.api --config lakesync.yaml`` declaring the table as a destination and
    ``owner = jwt:sub`` rules: over HTTP each client pulls only its own rows of the source."""
    config = tmp_path / "lakesync.yaml"
    config.write_text(yaml.safe_dump({
        "gateways": {"gw1": {
            "schemas": [{"table": "contacts", "columns": [
                {"name": n, "type": k} for n, k in COLUMNS]}],
            "rules": rules_to_wire(RULES),
        }},
        "destinations": {"crm": {"kind": "postgres", "url": crm.spec.url, "gateway": "gw1"}},
    }), encoding="utf-8")
    with ServerProcess(tmp_path / "data", config=config) as server:
        seen: dict[str, list[tuple[str, str]]] = {}
        for sub in ("alice", "bob"):
            r = httpx.get(f"{server.url}/v1/sync/gw1/pull", headers=auth(token(sub)),
                          params={"source": "crm", "since": "0", "clientId": sub})
            assert r.status_code == 200, r.text
            seen[sub] = [(d["op"], d["rowId"]) for d in r.json()["deltas"]]
        assert seen == {
            "alice": [("INSERT", "a1"), ("INSERT", "a2"), ("DELETE", "a3")],
            "bob": [("INSERT", "b1"), ("INSERT", "b2")],
        }
        r = httpx.get(f"{server.url}/v1/sync/gw1/pull", headers=auth(token("bob")),
                      params={"source": "other"})
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


def test_a_lake_source_is_read_from_the_gateways_own_lake(tmp_path: Path) -> None:
    from lakesync.destinations.factory import open_destination
    from lakesync.lakehouse.bootstrap import init_catalog_tables
    from lakesync.lakehouse.settings import LakeSettings

    lake = LakeSettings.from_env(tmp_path, env={})
    init_catalog_tables(lake)
    spec = DestinationSpec("lake", "lake://exports", "gw1", name="exp")
    with open_destination(spec, env={}, catalog=lake_catalog(lake)) as dest:
        layout = dest.layout("contacts", COLUMNS)
        dest.ensure_table(layout)
        dest.apply_changes(layout, [typed_change(layout, "a1", {"owner": "alice", "name": "A"}),
                                    typed_change(layout, "b1", {"owner": "bob", "name": "B"})])
    settings = make_settings(
        tmp_path, gateways={"gw1": GatewayConfig("gw1", [SCHEMA], RULES)},
        destinations={"exp": spec},
    )
    with TestClient(create_app(settings)) as client:
        r = client.get("/v1/sync/gw1/pull", headers=auth(token("bob")),
                       params={"source": "exp", "since": "0"})
        assert r.status_code == 200, r.text
        assert [(d["op"], d["rowId"]) for d in r.json()["deltas"]] == [("INSERT", "b1")]
