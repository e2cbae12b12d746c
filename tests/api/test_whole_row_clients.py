"""Clients that know no view evictions (the TypeScript client: whole-row last-writer-wins by HLC,
deletes as tombstones) follow rows in and out of their view: pulls, checkpoints and WebSocket
broadcasts send them whole rows clocked above everything they hold. A real gateway over HTTP.
"""

from __future__ import annotations

from typing import Any

import pytest
from websockets.sync.client import connect

from lakesync.delta import VIEW_ENTRY_CLIENT, VIEW_EVICTION_CLIENT
from lakesync.lakehouse.checkpoints import write_checkpoint
from lakesync.wsframes import decode_server_frame
from tests.api.conftest import Served
from tests.api.helpers import HANDOVER_OWNER_RULES, Replica, WholeRowReplica, auth, delta, token
from tests.wire_json import as_json

ALICE, BOB, ROOT = token("alice"), token("bob"), token("root", role="admin")
Rows = dict[tuple[str, str], dict[str, Any]]


@pytest.fixture
def ruled(served: Served) -> Served:
    """The served gateway under ``owner = jwt:sub`` rules."""
    r = served.gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=HANDOVER_OWNER_RULES)
    assert r.status_code == 200, r.text
    return served


def test_rows_handed_over_and_back_follow_whole_row_last_writer_wins(ruled: Served) -> None:
    gateway = ruled.gateway
    alice = WholeRowReplica()

    def write(tok: str, sub: str, *deltas: Any) -> None:
        assert gateway.push(tok, sub, list(deltas)).status_code == 200
        if sub == "alice":
            for d in deltas:
                alice.write(d)  # the client applies its own writes locally

    def check(expected: Rows) -> None:
        gateway.sync(ALICE, "alice", alice, limit=2)
        assert alice.rows() == expected

    check({})
    write(BOB, "bob", delta("INSERT", "t1", "bob", owner="bob", title="a", done=False))
    check({})
    write(BOB, "bob", delta("UPDATE", "t1", "bob", owner="alice"))  # handed to alice
    check({("todos", "t1"): {"owner": "alice", "title": "a", "done": False}})
    write(ROOT, "root", delta("UPDATE", "t1", "root", title="b"))
    check({("todos", "t1"): {"owner": "alice", "title": "b", "done": False}})
    write(ALICE, "alice", delta("UPDATE", "t1", "alice", owner="bob"))  # handed to bob
    check({})
    write(BOB, "bob", delta("UPDATE", "t1", "bob", owner="alice", done=True))  # handed back
    check({("todos", "t1"): {"owner": "alice", "title": "b", "done": True}})
    write(ROOT, "root", delta("UPDATE", "t1", "root", owner="carol"))  # taken by someone else
    check({})
    write(ROOT, "root", delta("UPDATE", "t1", "root", owner="alice", title="c"))
    check({("todos", "t1"): {"owner": "alice", "title": "c", "done": True}})
    write(ALICE, "alice", delta("DELETE", "t1", "alice"))
    check({})
    write(ROOT, "root", delta("INSERT", "t1", "root", owner="alice", title="new"))
    check({("todos", "t1"): {"owner": "alice", "title": "new"}})  # revived: older cells null
    none = {"version": 1, "buckets": [{"name": "none", "tables": [], "filters": [
        {"column": "owner", "op": "eq", "value": "nobody"}]}]}  # fmt: skip
    assert gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=none).status_code == 200
    check({})
    handover = gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=HANDOVER_OWNER_RULES)
    assert handover.status_code == 200
    check({("todos", "t1"): {"owner": "alice", "title": "new"}})


def test_a_row_is_one_eviction_and_one_whole_insert_unless_the_client_says_it_knows_evictions(
    ruled: Served,
) -> None:
    gateway = ruled.gateway
    gateway.push(ROOT, "root", [delta("INSERT", "t1", "root", owner="alice", title="a")])
    gateway.push(ROOT, "root", [delta("UPDATE", "t1", "root", done=True)])
    legacy = gateway.pull_page(ALICE, "alice", 0, evictions=False).json()["deltas"]
    assert [(d["op"], d["clientId"], d["hlc"] == legacy[0]["hlc"]) for d in legacy] == [
        ("DELETE", VIEW_EVICTION_CLIENT, True),
        ("INSERT", VIEW_ENTRY_CLIENT, True),
    ]
    assert {c["column"] for c in legacy[1]["columns"]} == {"owner", "title", "done"}
    # The Python client's header keeps the real clocks (one delta per writing clock).
    real = gateway.pull_page(ALICE, "alice", 0, evictions=True).json()["deltas"]
    assert [(d["op"], d["clientId"]) for d in real] == [
        ("DELETE", VIEW_EVICTION_CLIENT),
        ("INSERT", "root"),
        ("UPDATE", "root"),
    ]


def test_a_checkpoint_gives_whole_rows_then_pulls_follow(ruled: Served) -> None:
    gateway, store = ruled.gateway, ruled.store
    gateway.push(BOB, "bob", [delta("INSERT", "t1", "bob", owner="bob", title="a")])
    gateway.push(BOB, "bob", [delta("UPDATE", "t1", "bob", owner="alice")])
    gateway.push(ROOT, "root", [delta("UPDATE", "t1", "root", done=False)])
    alice = WholeRowReplica()
    for d in (
        delta("INSERT", "t2", "alice", owner="alice", title="x"),
        delta("UPDATE", "t2", "alice", owner="bob"),  # she gives it away
    ):
        gateway.push(ALICE, "alice", [d])
        alice.write(d)  # applied locally: she may still hold t2 (given away, not yet pulled)
    page = store.read_all_rows("gw1")
    assert write_checkpoint(store, "gw1", page.head, sorted(page.rows.items())) is not None
    gateway.load_checkpoint(ALICE, alice)
    assert alice.rows() == {("todos", "t1"): {"owner": "alice", "title": "a", "done": False}}
    gateway.push(BOB, "bob", [delta("UPDATE", "t2", "bob", owner="alice", done=True)])
    gateway.push(ROOT, "root", [delta("UPDATE", "t1", "root", title="b")])
    gateway.sync(ALICE, "alice", alice)
    full = Replica()
    gateway.sync(ALICE, "alice", full)
    assert alice.rows() == full.rows() and len(full.rows()) == 2


def test_websocket_broadcasts_give_whole_rows(ruled: Served) -> None:
    gateway = ruled.gateway
    gateway.push(BOB, "bob", [delta("INSERT", "t1", "bob", owner="bob", title="a")])
    alice = WholeRowReplica()
    gateway.sync(ALICE, "alice", alice)
    ws_url = ruled.url.replace("http", "ws") + "/v1/sync/gw1/ws"
    with connect(ws_url, additional_headers=auth(ALICE)) as ws:
        for tok, sub, cols in (
            (BOB, "bob", {"owner": "alice"}),  # handed to alice: appears
            (ROOT, "root", {"owner": "bob", "title": "c"}),  # leaves
            (ROOT, "root", {"owner": "alice"}),  # comes back changed
        ):
            assert gateway.push(tok, sub, [delta("UPDATE", "t1", sub, **cols)]).status_code == 200
        expected: list[Rows] = [
            {("todos", "t1"): {"owner": "alice", "title": "a"}},
            {},
            {("todos", "t1"): {"owner": "alice", "title": "c"}},
        ]
        for rows in expected:
            frame = decode_server_frame(ws.recv(timeout=30))  # type: ignore[arg-type]
            alice.apply([as_json(d) for d in frame.deltas])
            assert alice.rows() == rows
