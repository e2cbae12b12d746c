"""The sync WebSocket (docs/protocol.md §9) through Litestar's test client: push, pull, broadcasts,
closes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from litestar.exceptions import WebSocketDisconnect
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.delta import VIEW_EVICTION_CLIENT
from lakesync.merge import merge_state
from lakesync.proto import lakesync_pb2 as pb
from lakesync.wire import FEATURES_HEADER, VIEW_EVICTIONS_FEATURE
from lakesync.wsframes import decode_server_frame, encode_pull, encode_push
from tests.api.helpers import Gateway, auth, delta, make_settings, token

OWNER_RULES = {  # handover: a client may give its rows away
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            "handover": True,
        }
    ],
}


def ws(gateway: Gateway, sub: str, path: str = "/v1/sync/gw1/ws", header: bool = False) -> Any:
    """A socket of a client that knows view evictions (as the Python client), its token in the
    Authorization header or the query."""
    tok = token(sub)
    if header:
        return gateway.http.websocket_connect(path, headers=auth(tok, evictions=True))
    features = {FEATURES_HEADER: VIEW_EVICTIONS_FEATURE}
    return gateway.http.websocket_connect(f"{path}?token={tok}", headers=features)


@pytest.mark.parametrize("path", ["/v1/sync/gw1/ws", "/sync/gw1/ws"])
def test_push_pull_and_broadcast(gateway: Gateway, path: str) -> None:
    with ws(gateway, "alice", path, header=True) as a, ws(gateway, "bob", path) as b:
        d1 = delta("INSERT", "r1", "alice", title="x")
        a.send_bytes(encode_push("alice", [d1]))
        reply = decode_server_frame(a.receive_bytes())
        assert not reply.broadcast and reply.deltas == [] and reply.server_hlc > d1.hlc
        cast = decode_server_frame(b.receive_bytes())
        assert cast.broadcast and cast.deltas == [d1]
        b.send_bytes(encode_pull("bob", 0, 10))
        page = decode_server_frame(b.receive_bytes())
        assert not page.broadcast and page.deltas == [d1] and not page.has_more
        # Never echoed: alice's next frame is the reply to her own pull, not a broadcast.
        a.send_bytes(encode_pull("alice", reply.server_hlc, 10))
        own = decode_server_frame(a.receive_bytes())
        assert not own.broadcast and own.deltas == []


def test_a_repeated_push_under_rules_with_a_subscriber_is_acknowledged(gateway: Gateway) -> None:
    """A re-push of stored deltas (a lost acknowledgement) stores nothing new: it is answered,
    and broadcasts nothing, even with sync rules and another client connected."""
    assert gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=OWNER_RULES).status_code == 200
    with ws(gateway, "alice") as a, ws(gateway, "bob"):
        d1 = delta("INSERT", "r1", "alice", owner="alice")
        for _ in range(2):
            a.send_bytes(encode_push("alice", [d1]))
            reply = decode_server_frame(a.receive_bytes())
            assert not reply.broadcast and reply.server_hlc > d1.hlc


def test_broadcasts_follow_each_receivers_rules(gateway: Gateway) -> None:
    assert gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=OWNER_RULES).status_code == 200
    with ws(gateway, "alice") as a, ws(gateway, "bob") as b, ws(gateway, "carol") as c:
        c.send_bytes(encode_pull("carol", 0, 10))  # the resync after the rules change
        cursor = decode_server_frame(c.receive_bytes()).server_hlc
        # Carol writes r1 and hands it to bob in one push (she may not create it as his).
        d1 = delta("INSERT", "r1", "carol", owner="carol", title="for bob")
        handed = delta("UPDATE", "r1", "carol", d1.hlc + 1, owner="bob")
        c.send_bytes(encode_push("carol", [d1, handed]))
        assert not decode_server_frame(c.receive_bytes()).broadcast
        to_bob = decode_server_frame(b.receive_bytes())
        assert [d.op for d in to_bob.deltas] == ["DELETE", "INSERT", "UPDATE"]
        assert merge_state(to_bob.deltas) == {("todos", "r1"): {"owner": "bob", "title": "for bob"}}
        # Alice never saw r1: she hears nothing about it (her next frame is about r1 as hers).
        # Bob gives r1 to alice: bob's copy is deleted, alice gets the whole row.
        d2 = delta("UPDATE", "r1", "bob", owner="alice")
        b.send_bytes(encode_push("bob", [d2]))
        assert not decode_server_frame(b.receive_bytes()).broadcast
        to_alice = decode_server_frame(a.receive_bytes())
        # The row with its real clocks: bob's write (the latest) as the INSERT, carol's title.
        assert [(d.op, d.client_id) for d in to_alice.deltas] == [
            ("DELETE", VIEW_EVICTION_CLIENT),
            ("INSERT", "bob"),
            ("UPDATE", "carol"),
        ]
        assert merge_state(to_alice.deltas) == {
            ("todos", "r1"): {"owner": "alice", "title": "for bob"}
        }
        # Bob is the sender: never echoed (his own pull evicts the row from his replica).
        # Carol wrote r1 for bob: no broadcast to her, and her pull removes her local copy.
        c.send_bytes(encode_pull("carol", cursor, 10))
        reply = decode_server_frame(c.receive_bytes())
        assert not reply.broadcast
        assert [(d.op, d.row_id) for d in reply.deltas] == [("DELETE", "r1")]


def _closed(gateway: Gateway, path: str, frame: bytes | str | None = None) -> int:
    with gateway.http.websocket_connect(path) as sock:
        if isinstance(frame, bytes):
            sock.send_bytes(frame)
        elif isinstance(frame, str):
            sock.send_text(frame)
        with pytest.raises(WebSocketDisconnect) as info:
            sock.receive_bytes()
    return info.value.code


def test_close_codes(gateway: Gateway) -> None:
    base = "/v1/sync/gw1/ws"
    assert _closed(gateway, base) == 4401
    assert _closed(gateway, f"{base}?token=garbage") == 4401
    assert _closed(gateway, f"{base}?token={token('alice', gw='gw2')}") == 4403
    good = f"{base}?token={token('alice')}"
    assert _closed(gateway, good, "text") == 1003
    assert _closed(gateway, good, b"\x09abc") == 4400
    assert _closed(gateway, good, encode_pull("bob", 0, 1)) == 4403
    bad = delta("INSERT", "r1", "alice", table="todos", x=1)
    assert _closed(gateway, good, encode_push("alice", [bad])[:-3]) == 4400
    foreign = delta("INSERT", "r1", "bob", x=1)
    assert _closed(gateway, good, encode_push("alice", [foreign])) == 4403
    deep = b"[" * 5000 + b"]" * 5000
    column = pb.ColumnDelta(column="c", value=deep)
    msg = pb.SyncPush(
        client_id="alice",
        deltas=[
            pb.RowDelta(
                op=pb.INSERT,
                table="t",
                row_id="r",
                columns=[column],
                hlc=1,
                client_id="alice",
                delta_id="x",
            )
        ],
    )
    assert _closed(gateway, good, b"\x01" + msg.SerializeToString()) == 4400


def test_connection_cap_and_frame_rate(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, ws_max_connections=1, ws_rate_limit=0.001)
    with TestClient(create_app(settings)) as client:
        gw = Gateway(client)
        with ws(gw, "alice") as a:
            for _ in range(5):  # the burst; a reply also proves alice is registered
                a.send_bytes(encode_pull("alice", 0, 1))
                assert not decode_server_frame(a.receive_bytes()).broadcast
            assert _closed(gw, f"/v1/sync/gw1/ws?token={token('bob')}") == 1013
            a.send_bytes(encode_pull("alice", 0, 1))
            with pytest.raises(WebSocketDisconnect) as info:
                a.receive_bytes()
            assert info.value.code == 1008


def _pulls(sock: Any, sub: str) -> None:
    sock.send_bytes(encode_pull(sub, 0, 1))
    assert not decode_server_frame(sock.receive_bytes()).broadcast


def test_one_client_or_gateway_cannot_take_every_slot(tmp_path: Path) -> None:
    """Issue 15 #9: per-client and per-gateway caps under the global one (0 = no cap)."""
    settings = make_settings(
        tmp_path,
        ws_max_connections=0,
        ws_max_connections_per_gateway=3,
        ws_max_connections_per_client=2,
    )
    other_gw = f"/v1/sync/gw2/ws?token={token('carol', gw='gw2')}"
    with TestClient(create_app(settings)) as client:
        gw = Gateway(client)
        with ws(gw, "alice") as a1, ws(gw, "alice") as a2:
            assert _closed(gw, f"/v1/sync/gw1/ws?token={token('alice')}") == 1013
            with ws(gw, "bob") as b:  # alice's cap leaves room for others
                for sock, sub in ((a1, "alice"), (a2, "alice"), (b, "bob")):
                    _pulls(sock, sub)
                assert _closed(gw, f"/v1/sync/gw1/ws?token={token('carol')}") == 1013
                with gw.http.websocket_connect(other_gw) as c:  # gw1's cap leaves gw2 room
                    _pulls(c, "carol")
        with ws(gw, "alice") as again:  # closed sockets give their slots back
            _pulls(again, "alice")


def test_zero_means_no_connection_cap(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        ws_max_connections=0,
        ws_max_connections_per_gateway=0,
        ws_max_connections_per_client=0,
    )
    with TestClient(create_app(settings)) as client:
        gw = Gateway(client)
        with ws(gw, "alice") as a, ws(gw, "alice") as b:
            _pulls(a, "alice")
            _pulls(b, "alice")
