"""Concurrent additive ``POST /v1/admin/schema`` against a real ``lakesync up``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.api.helpers import auth, delta, token
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

pytestmark = pytest.mark.slow

ROUNDS = 10
RACERS = 6


def test_concurrent_schema_evolutions_never_lose_an_acknowledged_column(tmp_path: Path) -> None:
    admin = auth(token("ops", role="admin"))
    alice = auth(token("alice"))
    with ServerProcess(tmp_path / "data") as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        for n in range(ROUNDS):
            table = f"t{n}"
            base = [{"name": "title", "type": "string"}]
            r = http.post(
                "/v1/admin/schema/gw1", json={"table": table, "columns": base}, headers=admin
            )
            assert r.status_code == 200, r.text

            def add(i: int, table: str = table, base: list[dict[str, str]] = base) -> int:
                columns = [*base, {"name": f"c{i}", "type": "number"}]
                body = {"table": table, "columns": columns}
                return httpx.post(
                    f"{gw.url}/v1/admin/schema/gw1", json=body, headers=admin
                ).status_code

            with ThreadPoolExecutor(RACERS) as pool:
                statuses = list(pool.map(add, range(RACERS)))
            assert set(statuses) <= {200, 422}, statuses
            assert statuses.count(200) >= 1
            # Every column acknowledged with a 200 is still registered: a push naming it is stored.
            for i, status in enumerate(statuses):
                if status == 200:
                    d = delta("INSERT", f"r{n}-{i}", "alice", table=table, **{f"c{i}": i})
                    body = {"clientId": "alice", "deltas": [as_json(d)]}
                    r = http.post("/v1/sync/gw1/push", json=body, headers=alice)
                    assert r.status_code == 200, (
                        f"acknowledged column c{i} of {table} lost: {r.text}"
                    )
