"""A real ``lakesync up`` restarted on its lakesync.yaml keeps what the admin API changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.api.helpers import auth, delta, token
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

pytestmark = pytest.mark.slow

MINE = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        }
    ],
}
EVERYTHING = {"version": 1, "buckets": [{"name": "all", "tables": [], "filters": []}]}
COLUMNS = [{"name": "title", "type": "string"}, {"name": "owner", "type": "string"}]


def _push(url: str, client: str, **cols: Any) -> httpx.Response:
    d = delta("INSERT", f"{client}-row", client, **cols)
    return httpx.post(
        f"{url}/v1/sync/gw1/push",
        headers=auth(token(client)),
        json={"clientId": client, "deltas": [as_json(d)]},
    )


def _rows_seen_by(url: str, client: str) -> set[str]:
    r = httpx.get(
        f"{url}/v1/sync/gw1/pull",
        params={"since": "0", "clientId": client, "limit": "1000"},
        headers=auth(token(client)),
    )
    assert r.status_code == 200, r.text
    return {d["rowId"] for d in r.json()["deltas"]}


def test_restart_neither_fails_nor_undoes_admin_changes(tmp_path: Path) -> None:
    config = tmp_path / "lakesync.yaml"
    gateways = {"gw1": {"schemas": [{"table": "todos", "columns": COLUMNS}], "rules": MINE}}
    config.write_text(yaml.safe_dump({"gateways": gateways}))
    admin = auth(token("ops", role="admin"))
    with ServerProcess(tmp_path / "data", config=config) as gw:
        with_stars = {"table": "todos", "columns": [*COLUMNS, {"name": "stars", "type": "number"}]}
        r = httpx.post(f"{gw.url}/v1/admin/schema/gw1", json=with_stars, headers=admin)
        assert r.status_code == 200, r.text
        r = httpx.post(f"{gw.url}/v1/admin/sync-rules/gw1", json=EVERYTHING, headers=admin)
        assert r.status_code == 200, r.text
        assert _push(gw.url, "alice", title="a", owner="alice", stars=5).status_code == 200

    # The yaml lacks the admin's column and holds other rules: the gateway still starts...
    with ServerProcess(tmp_path / "data", config=config) as gw:
        # ...the column added through the admin route is still accepted...
        assert _push(gw.url, "bob", title="b", owner="bob", stars=1).status_code == 200
        # ...and the admin's rules (everything visible) are still in force.
        assert _rows_seen_by(gw.url, "bob") == {"alice-row", "bob-row"}
