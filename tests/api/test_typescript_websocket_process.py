"""The original TypeScript client's WebSocket transport (run under bun) against a fresh
``lakesync up``: its first sync on a gateway that has stored nothing answers (a reply is never
an empty frame, docs/protocol.md §9), then push, a broadcast to a connected client and pulls
work, with and without sync rules (tests/js/lakesync_ts_probe.ts, ``websocketScenario``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync.delta import RowDelta
from tests.api.helpers import auth, now_hlc, token
from tests.gateway_process import ServerProcess
from tests.lakesync_ts import require_ts_client, run_websocket_scenario
from tests.wire_json import as_json

pytestmark = pytest.mark.slow

SCHEMA = {"table": "todos", "columns": [{"name": "title", "type": "string"},
                                        {"name": "team", "type": "string"}]}
TEAM_RULES = {
    "version": 1,
    "buckets": [{"name": "team", "tables": ["todos"],
                 "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}],
}
A_ROW = {"id": "r1", "title": "from a", "team": "red"}
DORA_ROW = {"id": "r2", "title": "from dora", "team": "blue"}


@pytest.mark.parametrize("rules", [False, True], ids=["no rules", "rules by team"])
def test_the_typescript_websocket_transport_syncs_from_an_empty_gateway(
    tmp_path: Path, rules: bool
) -> None:
    require_ts_client()
    with ServerProcess(tmp_path / "data", env={"LAKESYNC_FLUSH_INTERVAL": "0"}) as gateway:
        admin = auth(token("root", role="admin"))
        if rules:  # set before anything is stored: the gateway stays empty
            r = httpx.post(f"{gateway.url}/v1/admin/schema/gw1", json=SCHEMA, headers=admin)
            assert r.status_code == 200, r.text
            r = httpx.post(f"{gateway.url}/v1/admin/sync-rules/gw1", json=TEAM_RULES,
                           headers=admin)
            assert r.status_code == 200, r.text
        tokens = {sub: token(sub, team="blue" if sub == "dora" else "red")
                  for sub in ("a", "b", "c", "dora")}
        result: dict[str, Any] = run_websocket_scenario({
            "url": gateway.url, "gw": "gw1", "tokens": tokens, "doraVisible": not rules,
        })

    # The first syncs answered (before, the reply to a pull of an empty gateway was a
    # zero-byte frame and the client waited for it for ever).
    assert result["firstSyncMs"] < 60_000
    assert result["queuedAfterPush"] == 0  # a's push was acknowledged
    assert result["bByBroadcast"] == [A_ROW]  # reached b by broadcast, before b pulled
    assert result["bBroadcasts"] >= 1
    seen_by_red = [A_ROW] if rules else [A_ROW, DORA_ROW]
    assert result["c"] == seen_by_red  # c's first sync pulled
    assert result["b"] == seen_by_red
    assert result["a"] == seen_by_red
    assert result["dora"] == ([DORA_ROW] if rules else [A_ROW, DORA_ROW])


def test_the_typescript_client_holds_its_view_as_memberships_change(tmp_path: Path) -> None:
    """Relational rules: the TypeScript client (WebSocket, no view evictions) receives the todos
    of a list it joins and loses those of a list it leaves, live, and a sync agrees."""
    require_ts_client()
    rules = {"version": 1, "buckets": [{"name": "lists", "tables": ["todos"], "filters": [
        {"column": "team", "op": "in", "value": {
            "table": "list_members", "select": "team",
            "where": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}]}}]}]}

    def body(*deltas: RowDelta) -> dict[str, Any]:
        return {"clientId": "root", "deltas": [as_json(d) for d in deltas]}

    with ServerProcess(tmp_path / "data", env={"LAKESYNC_FLUSH_INTERVAL": "0"}) as gateway:
        admin = auth(token("root", role="admin"))
        r = httpx.post(f"{gateway.url}/v1/admin/sync-rules/gw1", json=rules, headers=admin)
        assert r.status_code == 200, r.text
        seed = body(
            RowDelta.create("INSERT", "list_members", "m1", "root",
                            {"user_id": "alice", "team": "l1"}, now_hlc()),
            RowDelta.create("INSERT", "todos", "r1", "root", {"title": "one", "team": "l1"},
                            now_hlc()),
            RowDelta.create("INSERT", "todos", "r2", "root", {"title": "two", "team": "l2"},
                            now_hlc()),
        )
        r = httpx.post(f"{gateway.url}/v1/sync/gw1/push", json=seed, headers=admin)
        assert r.status_code == 200, r.text
        result = run_websocket_scenario({
            "kind": "relations", "url": gateway.url, "gw": "gw1", "token": token("alice"),
            "adminToken": token("root", role="admin"),
            "join": body(RowDelta.create("INSERT", "list_members", "m2", "root",
                                         {"user_id": "alice", "team": "l2"}, now_hlc())),
            "leave": body(RowDelta.create("DELETE", "list_members", "m1", "root", {},
                                          now_hlc(1))),
        })
    one = {"id": "r1", "title": "one", "team": "l1"}
    two = {"id": "r2", "title": "two", "team": "l2"}
    assert result["first"] == [one]
    assert result["joined"] == [one, two]
    assert result["left"] == [two]
    assert result["synced"] == [two]
