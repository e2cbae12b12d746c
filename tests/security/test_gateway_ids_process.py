"""Gateway ids against a real ``lakesync up``: bad ids are 4xx everywhere, and a
hot log already holding a gateway whose rows cannot land stops no other tenant."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import jwt
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.settings import LakeSettings
from tests.api.helpers import SECRET, auth, delta, token
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

pytestmark = pytest.mark.slow

# URL-encoded, its landing partition directory name is longer than 255 bytes.
LONG_GW = "g" * 300


def _raw_token(gw: str, role: str = "admin") -> str:
    """A token for any ``gw``, signed without the minting checks (a hostile or legacy token)."""
    return jwt.encode(
        {"sub": "ops", "gw": gw, "role": role, "exp": int(time.time()) + 600}, SECRET, "HS256"
    )


def _push(url: str, gw: str, tok: str, client: str, n: int) -> httpx.Response:
    deltas = [delta("INSERT", f"{client}-{time.time_ns()}-{i}", client, v=i) for i in range(n)]
    return httpx.post(
        f"{url}/v1/sync/{gw}/push",
        headers=auth(tok),
        json={"clientId": client, "deltas": [as_json(d) for d in deltas]},
        timeout=30,
    )


def test_bad_gateway_ids_are_refused_and_cannot_stop_other_tenants(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # A hot log from before gateway ids were checked: 40 KB under an id that cannot land.
    legacy = SqliteHotLog(data / "hotlog.sqlite3", HLC())
    legacy.append(LONG_GW, [delta("INSERT", f"x{i}", "old", v="x" * 1000) for i in range(40)])
    legacy.close()
    env = {"LAKESYNC_BACKPRESSURE_BYTES": "20000", "LAKESYNC_FLUSH_INTERVAL": "0.5"}
    acked: list[str] = []
    with ServerProcess(data, env=env) as gw:
        # Every route answers a bad gateway id with the protocol error body, before any token check.
        for bad in (LONG_GW, "gw-1", "gw.1"):
            r = httpx.post(
                f"{gw.url}/v1/sync/{bad}/push",
                headers=auth(_raw_token(bad, "client")),
                json={"clientId": "ops", "deltas": []},
            )
            assert (r.status_code, r.json()["code"]) == (400, "VALIDATION_ERROR"), r.text
            assert "invalid gateway id" in r.json()["error"]
            r = httpx.post(f"{gw.url}/v1/admin/schema/{bad}", headers=auth(_raw_token(bad)))
            assert r.status_code == 400, r.text
            r = httpx.get(f"{gw.url}/v1/sync/{bad}/pull", params={"since": "0"})
            assert r.status_code == 400, r.text
            with connect(f"{gw.ws_url}/v1/sync/{bad}/ws?token={_raw_token(bad)}") as ws:
                with pytest.raises(ConnectionClosed) as closed:
                    ws.recv(timeout=10)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400

        # The legacy tenant's rows cannot land, yet the others are not pushed into backpressure.
        alice = token("alice")
        deadline = time.monotonic() + 30
        while True:
            r = _push(gw.url, "gw1", alice, "alice", 5)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200, f"gw1 still turned away: {r.status_code} {r.text}"
        acked.extend(d["deltaId"] for d in r.json()["deltas"])
        for _ in range(10):
            r = _push(gw.url, "gw1", alice, "alice", 5)
            assert r.status_code == 200, r.text
            acked.extend(d["deltaId"] for d in r.json()["deltas"])
            r = httpx.post(f"{gw.url}/v1/admin/flush/gw1", headers=auth(token("ops", role="admin")))
            assert r.status_code == 200 and r.json()["flushed"], r.text
        assert gw.stop() == 0  # SIGTERM runs the orderly shutdown
    log = gw.log_path.read_text()
    assert f"the rows of gateway {LONG_GW!r} cannot be written" in log

    table = open_catalog(LakeSettings.from_env(data, env={})).load_table(LANDING_IDENTIFIER)
    landed = Counter(
        (row["gateway_id"], row["delta_id"]) for row in table.scan().to_arrow().to_pylist()
    )
    assert set(landed.values()) == {1}
    assert {d for g, d in landed if g == "gw1"} == set(acked)
    assert {g for g, _ in landed} == {"gw1"}
