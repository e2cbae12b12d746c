"""``GET /v1/sync/{gw}/checkpoint`` and the trimmed hot log, on an in-process gateway.

Checkpoints are written from the store's own merged rows here (the gateway serves whatever the
store holds; building them from the lake is tested in tests/lakehouse/test_checkpoints.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from litestar.exceptions import WebSocketDisconnect
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.api.services.initial_sync import CheckpointGoneError, open_checkpoint
from lakesync.checkpoint_chunks import CONTENT_TYPE
from lakesync.hlc import HLC
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.rules import parse_rules, visible
from lakesync.wsframes import decode_response
from tests.api.helpers import (
    Gateway,
    PlainReplica,
    Replica,
    auth,
    checkpoint_now,
    delta,
    make_settings,
    now_hlc,
    token,
)
from tests.wire_json import as_json

ALICE, BOB, CAROL = token("alice"), token("bob"), token("carol")
CAROL_ADMIN = token("carol", role="admin")  # under rules carol may not write alice's rows
OWNER_RULES = {  # handover: a client may give its rows away
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            "handover": True,
        }
    ],
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HotLog]:
    s = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    yield s
    s.close()


@pytest.fixture
def gateway(tmp_path: Path, store: HotLog) -> Iterator[Gateway]:
    with TestClient(create_app(make_settings(tmp_path), store=store)) as client:
        yield Gateway(client)



def download(gateway: Gateway, tok: str) -> tuple[int, list[list[dict[str, Any]]]]:
    r = gateway.http.get("/v1/sync/gw1/checkpoint", headers=auth(tok))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == CONTENT_TYPE
    position = int(r.headers["x-checkpoint-hlc"])
    body, frames = r.content, []
    while body:
        size = int.from_bytes(body[:4], "big")
        deltas, server_hlc, _ = decode_response(body[4 : 4 + size])
        assert server_hlc == position
        frames.append([as_json(d) for d in deltas])
        body = body[4 + size :]
    return position, frames


def history(gateway: Gateway) -> None:
    """Rows of three clients: a delete, a revival, a partial update, and a row given away."""
    base = now_hlc()
    pushes = [
        (
            ALICE,
            "alice",
            [delta("INSERT", f"a{i}", "alice", base + i, owner="alice", n=i) for i in range(8)],
        ),
        (
            BOB,
            "bob",
            [delta("INSERT", f"b{i}", "bob", base + 10 + i, owner="bob", n=i) for i in range(5)],
        ),
        (
            ALICE,
            "alice",
            [
                delta("DELETE", "a1", "alice", base + 20),
                delta("DELETE", "a2", "alice", base + 21),
                delta("UPDATE", "a2", "alice", base + 22, owner="alice", n=99),  # revived
                delta("UPDATE", "a3", "alice", base + 23, owner="bob"),
            ],
        ),
        (CAROL_ADMIN, "carol", [delta("UPDATE", "a0", "carol", base + 24, n=7)]),
    ]
    for tok, sub, deltas in pushes:
        assert gateway.push(tok, sub, deltas).status_code == 200


def later(gateway: Gateway) -> None:
    """Writes after the checkpoint, one of them late (an HLC older than the rows' DELETEs)."""
    base = now_hlc()
    old = now_hlc(-60_000)
    assert (
        gateway.push(
            BOB,
            "bob",
            [
                delta("UPDATE", "a1", "bob", old, n=5),
                delta("UPDATE", "b0", "bob", base, owner="alice"),
                delta("INSERT", "b9", "bob", base + 1, owner="bob"),
            ],
        ).status_code
        == 200
    )


def test_without_a_checkpoint_the_route_answers_404(gateway: Gateway) -> None:
    r = gateway.http.get("/v1/sync/gw1/checkpoint", headers=auth(ALICE))
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


@pytest.mark.parametrize("replica_type", [Replica, PlainReplica])
def test_checkpoint_then_pull_equals_a_full_pull(
    gateway: Gateway, store: HotLog, replica_type: type[Replica | PlainReplica]
) -> None:
    history(gateway)
    head = checkpoint_now(store)
    position, frames = download(gateway, CAROL)
    assert position == head and len(frames) > 3
    seeded = replica_type()
    for frame in frames:
        seeded.apply(frame)
    seeded.cursor = position
    later(gateway)
    gateway.sync(CAROL, "carol", seeded)
    full = Replica()
    gateway.sync(CAROL, "carol", full)
    assert seeded.rows() == full.rows()
    assert ("todos", "a1") not in full.rows()  # the late write loses to the checkpoint's DELETE


def test_under_rules_each_client_receives_only_its_view(gateway: Gateway, store: HotLog) -> None:
    assert gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=OWNER_RULES).status_code == 200
    history(gateway)
    checkpoint_now(store)
    rules = parse_rules(OWNER_RULES)
    everything = Replica()
    gateway.sync(token("root", role="admin"), "root", everything)
    seeded = {}
    for tok, sub in ((ALICE, "alice"), (BOB, "bob")):
        position, frames = download(gateway, tok)
        view = {k for k, v in everything.rows().items() if visible(rules, {"sub": sub}, k[0], v)}
        # Nothing outside the view but the removal of rows the client wrote (it may hold them).
        extra = [d for frame in frames for d in frame if (d["table"], d["rowId"]) not in view]
        assert all(d["op"] == "DELETE" for d in extra)
        assert {d["rowId"] for d in extra} == ({"a1", "a3"} if sub == "alice" else set())
        seeded[sub] = Replica()
        for frame in frames:
            seeded[sub].apply(frame)
        assert seeded[sub].rows() == {k: everything.rows()[k] for k in view}
        seeded[sub].cursor = position
    later(gateway)
    for tok, sub in ((ALICE, "alice"), (BOB, "bob")):
        gateway.sync(tok, sub, seeded[sub])
        full = Replica()
        gateway.sync(tok, sub, full)
        assert seeded[sub].rows() == full.rows()
    assert ("todos", "b0") in seeded["alice"].rows()  # given to alice after the checkpoint


def test_a_pull_from_before_the_trimmed_horizon_is_refused(gateway: Gateway, store: HotLog) -> None:
    history(gateway)
    position = checkpoint_now(store)
    store.mark_flushed(position)
    early = store.read_log(0, 3)[-1][0]
    assert store.trim_log("gw1", position) > 0
    for since in (0, early):
        r = gateway.pull_page(CAROL, "carol", since)
        assert r.status_code == 410 and r.json()["code"] == "CURSOR_EXPIRED", r.text
    assert gateway.pull_page(CAROL, "carol", position).status_code == 200
    with gateway.http.websocket_connect("/v1/sync/gw1/ws", headers=auth(CAROL)) as ws:
        ws.send_bytes(bytes.fromhex("020a05636172") + b"ol" + bytes.fromhex("1805"))
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive()
        assert closed.value.code == 4410  # 4000 + HTTP status, as for every error


def test_a_stream_on_a_replaced_generation_breaks_off(gateway: Gateway, store: HotLog) -> None:
    history(gateway)
    checkpoint_now(store, budget=100)
    service = gateway.http.app.state.service

    async def read() -> None:
        opened = await open_checkpoint(service, "gw1", {"sub": "carol"}, whole_rows=False)
        frames = opened.frames
        await frames.__anext__()
        gateway.push(BOB, "bob", [delta("INSERT", "new1", "bob", owner="x")])
        checkpoint_now(store)  # the stream's generation is kept once…
        await frames.__anext__()
        gateway.push(BOB, "bob", [delta("INSERT", "new2", "bob", owner="x")])
        checkpoint_now(store)  # …not twice
        with pytest.raises(CheckpointGoneError):
            # The gateway reads one chunk ahead: the one read before the replacement still goes.
            for _ in range(2):
                await frames.__anext__()

    anyio.run(read)
