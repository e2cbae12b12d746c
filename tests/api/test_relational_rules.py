"""Relational sync rules over a real gateway on each store (docs/protocol.md §8): a client sees
the todos of the lists it is a member of; a membership change moves rows into and out of its
view on its next pull, and writes are judged through the relation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lakesync.wire import FEATURES_HEADER, VIEW_EVICTIONS_FEATURE
from lakesync.wsframes import decode_server_frame, encode_pull
from tests.api.conftest import Served
from tests.api.helpers import (
    MEMBERS_RULES,
    Gateway,
    PlainReplica,
    Replica,
    WholeRowReplica,
    checkpoint_now,
    delta,
    set_rules,
    token,
)
from tests.wire_json import as_json

ALICE, BOB, ADMIN = token("alice"), token("bob"), token("root", role="admin")
Replicas = Replica | PlainReplica | WholeRowReplica



def member(gateway: Gateway, row: str, user: str, list_id: str) -> None:
    ok = gateway.push(
        ADMIN, "root", [delta("INSERT", row, "root", table="list_members",
                              user_id=user, list_id=list_id)]
    )
    assert ok.status_code == 200, ok.text


def todos(replica: Replicas) -> set[str]:
    return {r for (t, r) in replica.rows() if t == "todos"}


@pytest.fixture
def lists(served: Served) -> Gateway:
    """alice is a member of l1, bob of l2; each list has a todo."""
    gateway = served.gateway
    set_rules(gateway, MEMBERS_RULES)
    member(gateway, "m1", "alice", "l1")
    member(gateway, "m2", "bob", "l2")
    ok = gateway.push(ADMIN, "root", [delta("INSERT", "t1", "root", list_id="l1", title="a"),
                                      delta("INSERT", "t2", "root", list_id="l2", title="b")])
    assert ok.status_code == 200, ok.text
    return gateway


@pytest.mark.parametrize("kind", [Replica, PlainReplica, WholeRowReplica])
def test_membership_changes_move_rows_on_the_next_pull(
    lists: Gateway, kind: type[Replicas]
) -> None:
    alice, bob = kind(), kind()
    lists.sync(ALICE, "alice", alice)
    lists.sync(BOB, "bob", bob)
    assert todos(alice) == {"t1"}
    assert todos(bob) == {"t2"}
    assert set(alice.rows()) == {("todos", "t1"), ("list_members", "m1")}

    member(lists, "m3", "alice", "l2")  # alice joins l2: its todos enter her view
    r = lists.pull_page(ALICE, "alice", alice.cursor, evictions=alice.evictions)
    # What moved and what changed since her cursor, not her whole view again.
    assert {d["rowId"] for d in r.json()["deltas"]} == {"t2", "m3"}
    lists.sync(ALICE, "alice", alice)
    assert todos(alice) == {"t1", "t2"}
    assert alice.rows()[("todos", "t2")] == {"list_id": "l2", "title": "b"}

    ok = lists.push(ADMIN, "root", [delta("DELETE", "m1", "root", table="list_members")])
    assert ok.status_code == 200, ok.text  # she leaves l1: its todos leave her view
    lists.sync(ALICE, "alice", alice)
    assert todos(alice) == {"t2"}

    ok = lists.push(ADMIN, "root", [delta("UPDATE", "m2", "root", table="list_members",
                                          list_id="l1")])
    assert ok.status_code == 200, ok.text  # bob's membership moves from l2 to l1
    lists.sync(BOB, "bob", bob)
    assert todos(bob) == {"t1"}
    lists.sync(ALICE, "alice", alice)
    assert todos(alice) == {"t2"}  # nothing of alice's view changed

    fresh = kind()
    lists.sync(ALICE, "alice", fresh)
    assert fresh.rows() == alice.rows()


def test_writes_are_judged_through_the_relation(lists: Gateway) -> None:
    own = lists.push(ALICE, "alice", [delta("INSERT", "t3", "alice", list_id="l1")])
    assert own.status_code == 200, own.text
    other = lists.push(ALICE, "alice", [delta("INSERT", "t4", "alice", list_id="l2")])
    assert other.status_code == 403, other.text
    assert "WITH CHECK" in other.json()["error"]
    moved = lists.push(ALICE, "alice", [delta("UPDATE", "t3", "alice", list_id="l2")])
    assert moved.status_code == 403, moved.text
    foreign = lists.push(ALICE, "alice", [delta("UPDATE", "t2", "alice", title="x")])
    assert foreign.status_code == 403, foreign.text
    assert "USING" in foreign.json()["error"]
    member(lists, "m3", "alice", "l2")  # once a member, she may
    again = lists.push(ALICE, "alice", [delta("INSERT", "t4", "alice", list_id="l2")])
    assert again.status_code == 200, again.text


@pytest.mark.parametrize("kind", [Replica, PlainReplica])
def test_a_checkpoint_first_sync_equals_a_pull_from_zero(
    served: Served, lists: Gateway, kind: type[Replicas]
) -> None:
    member(lists, "m3", "alice", "l2")
    checkpoint_now(served.store)
    seeded = kind()
    lists.load_checkpoint(ALICE, seeded)
    member(lists, "m4", "alice", "l3")  # after the checkpoint: moves on the pull that follows
    ok = lists.push(ADMIN, "root", [delta("INSERT", "t5", "root", list_id="l3")])
    assert ok.status_code == 200, ok.text
    lists.sync(ALICE, "alice", seeded)
    full = Replica()
    lists.sync(ALICE, "alice", full)
    assert seeded.rows() == full.rows()
    assert todos(full) == {"t1", "t2", "t5"}



def test_rules_naming_unknown_tables_or_columns_in_a_subquery_are_refused(
    served: Served,
) -> None:
    gateway = served.gateway
    for table, columns in [("todos", ["list_id", "title"]), ("list_members", ["list_id",
                                                                              "user_id"])]:
        schema = {"table": table, "columns": [{"name": c, "type": "string"} for c in columns]}
        assert gateway.admin("POST", "/v1/admin/schema/gw1", json=schema).status_code == 200
    typo = copy.deepcopy(MEMBERS_RULES)
    typo["buckets"][0]["filters"][0]["value"]["table"] = "list_member"
    r = gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=typo)
    assert r.status_code == 422 and r.json()["code"] == "SCHEMA_ERROR"
    assert "did you mean 'list_members'?" in r.json()["error"], r.json()
    column = copy.deepcopy(MEMBERS_RULES)  # only inside the subquery's where
    column["buckets"][0]["filters"][0]["value"]["where"][0]["column"] = "userid"
    r = gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=column)
    assert r.status_code == 422 and "did you mean 'user_id'?" in r.json()["error"], r.json()
    assert "'shared'" in r.json()["error"], r.json()  # the bucket holding the subquery
    set_rules(gateway, MEMBERS_RULES)


@pytest.mark.parametrize("evictions", [True, False])
def test_sockets_receive_the_moves_live(gateway: Gateway, evictions: bool) -> None:
    """A membership change moves the rows it concerns into or out of a connected client's view
    at once, as a client of either kind applies them (the pull after it agrees)."""
    set_rules(gateway, MEMBERS_RULES)
    member(gateway, "m1", "alice", "l1")
    ok = gateway.push(ADMIN, "root", [delta("INSERT", "t1", "root", list_id="l1", title="a"),
                                      delta("INSERT", "t2", "root", list_id="l2", title="b")])
    assert ok.status_code == 200, ok.text
    live: Replicas = Replica() if evictions else WholeRowReplica()
    features = {FEATURES_HEADER: VIEW_EVICTIONS_FEATURE} if evictions else {}
    path = f"/v1/sync/gw1/ws?token={ALICE}"
    with gateway.http.websocket_connect(path, headers=features) as sock:
        sock.send_bytes(encode_pull("alice", 0, 100))
        page = decode_server_frame(sock.receive_bytes())
        live.apply([as_json(d) for d in page.deltas])
        assert todos(live) == {"t1"}

        def heard_until(done: Any) -> None:
            for _ in range(20):
                frame = decode_server_frame(sock.receive_bytes(timeout=60))
                assert frame.broadcast
                # A client without view evictions keeps its cursor (serverHlc 0), moves too.
                assert evictions or frame.server_hlc == 0, frame.server_hlc
                live.apply([as_json(d) for d in frame.deltas])
                if done():
                    return
            raise AssertionError(f"never converged: {live.rows()}")

        member(gateway, "m2", "alice", "l2")  # she joins l2: t2 arrives
        heard_until(lambda: todos(live) == {"t1", "t2"})
        assert live.rows()[("todos", "t2")] == {"list_id": "l2", "title": "b"}
        ok = gateway.push(ADMIN, "root", [delta("DELETE", "m1", "root", table="list_members")])
        assert ok.status_code == 200, ok.text  # she leaves l1: t1 leaves
        heard_until(lambda: todos(live) == {"t2"})
        member(gateway, "m9", "bob", "l1")  # someone else's membership: nothing for her
        ok = gateway.push(ADMIN, "root", [delta("UPDATE", "t2", "root", title="c")])
        assert ok.status_code == 200, ok.text
        frame = decode_server_frame(sock.receive_bytes(timeout=60))
        assert {(d.table, d.row_id) for d in frame.deltas} == {("todos", "t2")}
        live.apply([as_json(d) for d in frame.deltas])
    pulled: Replicas = Replica() if evictions else WholeRowReplica()
    gateway.sync(ALICE, "alice", pulled)
    assert live.rows() == pulled.rows()


def test_a_socket_connected_before_the_rules_hears_its_view_under_them(gateway: Gateway) -> None:
    member(gateway, "m1", "alice", "l1")
    live = Replica()
    features = {FEATURES_HEADER: VIEW_EVICTIONS_FEATURE}
    with gateway.http.websocket_connect(f"/v1/sync/gw1/ws?token={ALICE}", headers=features) as s:
        set_rules(gateway, MEMBERS_RULES)
        s.send_bytes(encode_pull("alice", 0, 100))
        live.apply([as_json(d) for d in decode_server_frame(s.receive_bytes()).deltas])
        assert set(live.rows()) == {("list_members", "m1")}
        ok = gateway.push(ADMIN, "root", [delta("INSERT", "t1", "root", list_id="l1")])
        assert ok.status_code == 200, ok.text  # a todo of her list, no membership change
        for _ in range(5):
            frame = decode_server_frame(s.receive_bytes(timeout=60))
            live.apply([as_json(d) for d in frame.deltas])
            if todos(live) == {"t1"}:
                break
        assert todos(live) == {"t1"}
