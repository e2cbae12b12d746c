"""The original TypeScript client's WebSocket transport (run under bun) against a fresh
``lakesync up``: its first sync on a gateway that has stored nothing answers (a reply is never
an empty frame, docs/protocol.md §9), then push, a broadcast to a connected client and pulls
work, with and without sync rules (tests/js/lakesync_ts_probe.ts, ``websocketScenario``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.helpers import auth, token
from tests.gateway_process import ServerProcess
from tests.lakesync_ts import require_ts_client, run_websocket_scenario

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
