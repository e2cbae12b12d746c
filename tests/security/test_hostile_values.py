"""Hostile column values against a real ``lakesync up``:

1. A number JavaScript reads as Infinity (``10**400``) is refused with a 400 naming the cell, on
   HTTP and WebSocket alike; numbers JavaScript holds inexactly (``2**53 + 1``) are stored,
   echoed, pulled and broadcast as the double JavaScript holds.
2. Nesting is limited once, at validation: whatever depth a push carries, it is answered 200 (and
   then pulled and broadcast like any value) or 4xx (and nothing is stored); pulls never fail.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from lakesync.canonical import canonical_json
from lakesync.delta import delta_id
from lakesync.proto import lakesync_pb2 as pb
from lakesync.values import MAX_VALUE_DEPTH, normalize_value
from lakesync.wsframes import TAG_BROADCAST, TAG_PUSH
from tests.api.helpers import auth, now_hlc, token
from tests.gateway_process import ServerProcess

pytestmark = pytest.mark.slow

RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": [],
            "filters": [
                {"column": "owner", "op": "eq", "value": "jwt:sub"},
            ],
        }
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("hostile") / "data").start()
    yield s
    s.stop()


def _js_delta_id(sub: str, hlc: int, row_id: str, columns: dict[str, str]) -> str:
    """The deltaId a JavaScript client would send, computed on a fresh thread (its recursion
    budget starts at zero, as a request's does in the gateway); a dummy one when even that is
    too deep (no gateway can store such a value)."""
    out = ["0" * 64]

    def run() -> None:
        try:
            values = [{"column": c, "value": json.loads(v)} for c, v in columns.items()]
            out[0] = delta_id(sub, hlc, "todos", row_id, values)
        except RecursionError:
            pass

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


def _push_body(sub: str, row_id: str, columns: dict[str, str], hlc: int) -> bytes:
    """A push of raw JSON column texts, built as text (json.dumps would hit the recursion limit)."""
    did = _js_delta_id(sub, hlc, row_id, columns)
    cols = ",".join(f'{{"column":"{c}","value":{v}}}' for c, v in columns.items())
    return (
        f'{{"clientId":"{sub}","deltas":[{{"op":"INSERT","table":"todos","rowId":"{row_id}",'
        f'"clientId":"{sub}","columns":[{cols}],"hlc":"{hlc}","deltaId":"{did}"}}]}}'
    ).encode()


def _push(server: ServerProcess, gw: str, sub: str, row_id: str, **columns: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/sync/{gw}/push",
        content=_push_body(sub, row_id, columns, now_hlc()),
        headers={**auth(token(sub, gw)), "Content-Type": "application/json"},
        timeout=30,
    )


def _pull(server: ServerProcess, gw: str, sub: str, role: str = "client") -> httpx.Response:
    return httpx.get(
        f"{server.url}/v1/sync/{gw}/pull",
        params={"since": "0", "clientId": sub, "limit": "10000"},
        headers=auth(token(sub, gw, role)),
        timeout=30,
    )


def _ws_push(ws: ClientConnection, sub: str, row_id: str, column: str, raw: bytes) -> None:
    d = pb.RowDelta(
        op=pb.INSERT,
        table="todos",
        row_id=row_id,
        client_id=sub,
        hlc=now_hlc(),
        columns=[pb.ColumnDelta(column=column, value=raw)],
        delta_id="0" * 64,
    )
    ws.send(bytes([TAG_PUSH]) + pb.SyncPush(client_id=sub, deltas=[d]).SerializeToString())


def _closed_with(ws: ClientConnection) -> tuple[int | None, str]:
    with pytest.raises(ConnectionClosed):
        while True:
            ws.recv(timeout=10)
    return ws.close_code, ws.close_reason or ""


def _broadcast_cells(ws: ClientConnection) -> dict[str, dict[str, Any]]:
    """The next broadcast's cells as the receiver's JSON parser reads them (no normalising)."""
    frame = ws.recv(timeout=10)
    assert isinstance(frame, bytes) and frame[0] == TAG_BROADCAST
    resp = pb.SyncResponse.FromString(frame[1:])
    return {
        d.row_id: {c.column: msgspec.json.decode(c.value) for c in d.columns} for d in resp.deltas
    }


def _rows(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["rowId"]: {c["column"]: c["value"] for c in d["columns"]} for d in body["deltas"]}


def test_numbers_are_one_value_everywhere(server: ServerProcess) -> None:
    gw = "numbers"
    with (
        connect(f"{server.ws_url}/v1/sync/{gw}/ws?token={token('carol', gw)}") as carol,
        connect(f"{server.ws_url}/v1/sync/{gw}/ws?token={token('alice', gw)}") as alice_ws,
    ):
        time.sleep(0.2)
        r = _push(server, gw, "alice", "poison", n="1" + "0" * 400)
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["code"] == "VALIDATION_ERROR"
        assert "'poison'" in body["error"] and "'n'" in body["error"]
        assert "Infinity" in body["error"]

        _ws_push(alice_ws, "alice", "poison2", "n", b"1" + b"0" * 400)
        code, reason = _closed_with(alice_ws)
        assert code == 4400 and "'poison2'" in reason and "'n'" in reason

        r = _push(
            server,
            gw,
            "alice",
            "edges",
            wide=str(2**53 + 1),
            negzero="-0.0",
            one="1.0",
            big=str(2**64 + 1),
            tiny="1e-7",
        )
        assert r.status_code == 200, r.text
        expected = {
            "wide": 2**53,
            "negzero": 0,
            "one": 1,
            "big": 18446744073709551616.0,
            "tiny": 1e-7,
        }
        echoed = _rows(r.json())
        pulled = _pull(server, gw, "bob").json()
        broadcast = _broadcast_cells(carol)
    for stage in (echoed, _rows(pulled), broadcast):
        # What a JavaScript client reads (the WebSocket carries JavaScript's number text, so
        # 2**64 arrives as 18446744073709552000), and what a Python replica holds: exact types,
        # 0 not -0.0, 1 not 1.0.
        assert canonical_json(stage["edges"]) == canonical_json(expected)
        assert repr(normalize_value(stage["edges"])) == repr(expected)
    assert [d["deltaId"] for d in pulled["deltas"]] == [r.json()["deltas"][0]["deltaId"]]
    assert "poison" not in _rows(pulled) and "poison2" not in _rows(pulled)


def _nested(depth: int, kind: str) -> str:
    if kind == "array":
        return "[" * depth + "1" + "]" * depth
    return '{"k":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("kind", ["array", "object"])
def test_any_nesting_is_stored_and_served_or_refused_never_half(
    server: ServerProcess, kind: str
) -> None:
    gw = f"deep_{kind}"
    admin = auth(token("root", gw, "admin"))
    r = httpx.post(f"{server.url}/v1/admin/sync-rules/{gw}", json=RULES, headers=admin)
    assert r.status_code == 200, r.text
    depths = [MAX_VALUE_DEPTH, MAX_VALUE_DEPTH + 1, 200, 940, 954, 5000]
    stored: dict[str, Any] = {}
    with connect(
        f"{server.ws_url}/v1/sync/{gw}/ws?token={token('alice', gw)}", max_size=None
    ) as alice_ws:
        time.sleep(0.2)
        for depth in depths:
            row = f"d{depth}"
            text = _nested(depth, kind)
            r = _push(server, gw, "alice", row, owner='"alice"', v=text)
            assert r.status_code == (200 if depth <= MAX_VALUE_DEPTH else 400), r.text
            if r.status_code == 200:
                stored[row] = text
                cells = _broadcast_cells(alice_ws)  # the subscriber hears of it, in full
                assert msgspec.json.encode(cells[row]["v"]) == text.encode()
            else:
                error = r.json()
                assert error["code"] == "VALIDATION_ERROR"
                # Named by row, unless too deep to even parse the body.
                assert f"'{row}'" in error["error"] or "nested too deeply" in error["error"]
            for who, role in (("alice", "client"), ("root", "admin")):
                p = _pull(server, gw, who, role)
                assert p.status_code == 200, f"pull after depth {depth}: {p.text[:200]}"
                served = {
                    k: msgspec.json.encode(v["v"]).decode() for k, v in _rows(p.json()).items()
                }
                assert served == stored
    assert set(stored) == {f"d{MAX_VALUE_DEPTH}"}

    with connect(f"{server.ws_url}/v1/sync/{gw}/ws?token={token('alice', gw)}") as ws:
        _ws_push(ws, "alice", "wsdeep", "v", _nested(MAX_VALUE_DEPTH + 1, kind).encode())
        code, reason = _closed_with(ws)
        assert code == 4400 and f"{MAX_VALUE_DEPTH} levels" in reason
