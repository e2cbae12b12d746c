"""Sync rules on merged state (docs/protocol.md §8): what reaches whom, write access, rule
changes."""

from __future__ import annotations

from typing import Any

from lakesync.rules import parse_rules, visible
from tests.api.helpers import Gateway, PlainReplica, Replica, auth, delta, set_rules, token

OWNER_RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        },
    ],
}
HANDOVER_RULES = {  # the same view, and a client may give its rows away
    "version": 1,
    "buckets": [{**OWNER_RULES["buckets"][0], "handover": True}],  # type: ignore[index]
}
ALICE, BOB, CAROL = token("alice"), token("bob"), token("carol")



def expected(
    rows: dict[tuple[str, str], dict[str, Any]], rules: dict[str, Any], sub: str
) -> dict[tuple[str, str], dict[str, Any]]:
    parsed = parse_rules(rules)
    return {k: v for k, v in rows.items() if visible(parsed, {"sub": sub}, k[0], v)}


def test_delete_partial_update_and_ownership_change_reach_the_right_clients(
    gateway: Gateway,
) -> None:
    set_rules(gateway, HANDOVER_RULES)
    replicas = {name: Replica() for name in ("alice", "bob", "carol")}
    toks = {"alice": ALICE, "bob": BOB, "carol": CAROL}

    def sync_all() -> None:
        for name, rep in replicas.items():
            gateway.sync(toks[name], name, rep)

    assert (
        gateway.push(
            ALICE,
            "alice",
            [
                delta("INSERT", "t1", "alice", owner="alice", title="one", done=False),
                delta("INSERT", "t2", "alice", owner="alice", title="two", done=False),
            ],
        ).status_code
        == 200
    )
    assert (
        gateway.push(
            BOB, "bob", [delta("INSERT", "t3", "bob", owner="bob", title="three")]
        ).status_code
        == 200
    )
    sync_all()
    assert set(replicas["alice"].rows()) == {("todos", "t1"), ("todos", "t2")}
    assert set(replicas["bob"].rows()) == {("todos", "t3")}
    assert replicas["carol"].rows() == {}

    # An UPDATE of a non-filter column reaches the owner.
    gateway.push(ALICE, "alice", [delta("UPDATE", "t1", "alice", done=True)])
    # A DELETE reaches the owner.
    gateway.push(ALICE, "alice", [delta("DELETE", "t2", "alice")])
    # An ownership change: the row leaves alice's view and enters bob's, with all its columns.
    gateway.push(BOB, "bob", [delta("UPDATE", "t3", "bob", owner="alice")])
    sync_all()
    assert replicas["alice"].rows() == {
        ("todos", "t1"): {"owner": "alice", "title": "one", "done": True},
        ("todos", "t3"): {"owner": "alice", "title": "three"},
    }
    assert replicas["bob"].rows() == {}
    assert replicas["carol"].rows() == {}
    gateway.push(ALICE, "alice", [delta("UPDATE", "t1", "alice", owner="carol")])
    sync_all()
    assert set(replicas["alice"].rows()) == {("todos", "t3")}
    assert replicas["carol"].rows() == {
        ("todos", "t1"): {"owner": "carol", "title": "one", "done": True}
    }


def test_rule_change_takes_effect_on_next_pull(gateway: Gateway) -> None:
    gateway.push(
        ALICE,
        "alice",
        [
            delta("INSERT", "t1", "alice", owner="alice", team="red"),
            delta("INSERT", "t2", "alice", owner="bob", team="red"),
            delta("INSERT", "t3", "alice", owner="bob", team="blue"),
        ],
    )
    bob = Replica()
    gateway.sync(BOB, "bob", bob)
    assert len(bob.rows()) == 3  # no rules: everything
    set_rules(gateway, OWNER_RULES)
    gateway.sync(BOB, "bob", bob)
    assert set(bob.rows()) == {("todos", "t2"), ("todos", "t3")}
    team_rules = {
        "version": 1,
        "buckets": [
            {"name": "team", "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
        ],
    }
    set_rules(gateway, team_rules)
    red_bob = token("bob", team="red")
    gateway.sync(red_bob, "bob", bob)
    assert set(bob.rows()) == {("todos", "t1"), ("todos", "t2")}
    # Claims change (a new token with another team) also takes effect on the next pull.
    gateway.sync(token("bob", team="blue"), "bob", bob)
    assert set(bob.rows()) == {("todos", "t3")}


def test_write_access_follows_the_rules(gateway: Gateway) -> None:
    set_rules(gateway, OWNER_RULES)
    r = gateway.push(ALICE, "alice", [delta("INSERT", "n1", "alice", table="notes", x=1)])
    assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN"
    assert gateway.push(BOB, "bob", [delta("INSERT", "t1", "bob", owner="bob")]).status_code == 200
    stolen = gateway.push(ALICE, "alice", [delta("UPDATE", "t1", "alice", owner="alice")])
    assert stolen.status_code == 403 and stolen.json()["code"] == "FORBIDDEN"
    # An admin token is not bound by the rules.
    admin = token("root", role="admin")
    r = gateway.push(admin, "root", [delta("UPDATE", "t1", "root", title="x")])
    assert r.status_code == 200


def test_a_client_cannot_create_a_row_for_someone_else(gateway: Gateway) -> None:
    """Issue 21: bob inserted a row with ``owner: alice``; it was accepted and showed up in
    alice's replica. Now refused (WITH CHECK), naming the table and bucket, nothing stored."""
    set_rules(gateway, HANDOVER_RULES)  # hand-over gives away held rows, creates none
    alice = Replica()
    planted = gateway.push(BOB, "bob", [delta("INSERT", "p1", "bob", owner="alice", title="x")])
    assert planted.status_code == 403, planted.text
    body = planted.json()
    assert body["code"] == "FORBIDDEN"
    assert "(WITH CHECK)" in body["error"] and "'todos'" in body["error"]
    assert "'mine'" in body["error"] and body["error"].startswith("deltas[0]: ")
    gateway.sync(ALICE, "alice", alice)
    assert alice.rows() == {}


def test_handover_lets_the_holder_give_a_row_away_and_only_then(gateway: Gateway) -> None:
    set_rules(gateway, OWNER_RULES)
    own = [delta("INSERT", "t1", "bob", owner="bob", title="x")]
    assert gateway.push(BOB, "bob", own).status_code == 200
    give = [delta("UPDATE", "t1", "bob", owner="alice")]
    refused = gateway.push(BOB, "bob", give)
    assert refused.status_code == 403 and "allows handover" in refused.json()["error"]
    set_rules(gateway, HANDOVER_RULES)
    assert gateway.push(BOB, "bob", give).status_code == 200
    alice = Replica()
    gateway.sync(ALICE, "alice", alice)
    assert alice.rows() == {("todos", "t1"): {"owner": "alice", "title": "x"}}
    back = gateway.push(BOB, "bob", [delta("UPDATE", "t1", "bob", owner="bob")])
    assert back.status_code == 403 and "(USING)" in back.json()["error"]  # no longer his


def test_a_refused_delta_is_named_by_its_place_in_the_push(gateway: Gateway) -> None:
    set_rules(gateway, OWNER_RULES)
    mine = delta("INSERT", "t1", "alice", owner="alice")
    assert gateway.push(ALICE, "alice", [mine]).status_code == 200
    # The re-sent delta is a duplicate (not judged again); the third is the one refused.
    batch = [mine, delta("UPDATE", "t1", "alice", title="ok"), delta("INSERT", "t2", "alice")]
    r = gateway.push(ALICE, "alice", batch)
    assert r.status_code == 403 and r.json()["error"].startswith("deltas[2]: "), r.text


def test_snapshot_deltas_are_valid_wire_deltas(gateway: Gateway) -> None:
    set_rules(gateway, OWNER_RULES)
    gateway.push(ALICE, "alice", [delta("INSERT", "t1", "alice", owner="alice", n=1.5)])
    body = gateway.http.get("/v1/sync/gw1/pull", params={"since": "0"}, headers=auth(ALICE)).json()
    rep = Replica()
    rep.apply(body["deltas"])  # read as the gateway reads a push: every deltaId recomputed
    assert [d["op"] for d in body["deltas"]] == ["DELETE", "INSERT"]
    assert rep.rows() == {("todos", "t1"): {"owner": "alice", "n": 1.5}}


def test_rows_a_client_never_saw_are_not_mentioned(gateway: Gateway) -> None:
    set_rules(gateway, HANDOVER_RULES)
    bob = Replica()
    gateway.sync(BOB, "bob", bob)  # the resync after the rules change (empty gateway)
    gateway.push(ALICE, "alice", [delta("INSERT", "secret", "alice", owner="alice", x=1)])
    gateway.push(ALICE, "alice", [delta("UPDATE", "secret", "alice", x=2)])
    gateway.push(ALICE, "alice", [delta("DELETE", "secret", "alice")])
    body = gateway.pull_page(BOB, "bob", bob.cursor).json()
    assert body["deltas"] == []
    # A row bob did see is deleted from his replica when it leaves his view.
    gateway.push(BOB, "bob", [delta("INSERT", "mine", "bob", owner="bob")])
    gateway.sync(BOB, "bob", bob)
    gateway.push(BOB, "bob", [delta("UPDATE", "mine", "bob", owner="alice")])
    page = gateway.pull_page(BOB, "bob", bob.cursor).json()
    assert [(d["op"], d["rowId"]) for d in page["deltas"]] == [("DELETE", "mine")]


def test_a_client_without_cell_clocks_follows_rows_in_and_out_of_its_view(
    gateway: Gateway,
) -> None:
    """Wire compatibility: the TypeScript client's way of applying deltas (no clocks, INSERT of
    an existing row fails) keeps exactly the view as rows appear, change, leave and come back."""
    set_rules(gateway, HANDOVER_RULES)
    admin = token("root", role="admin")
    alice = PlainReplica()

    def check(expected: dict[tuple[str, str], dict[str, Any]]) -> None:
        gateway.sync(ALICE, "alice", alice, limit=2)
        assert alice.rows() == expected

    check({})
    gateway.push(BOB, "bob", [delta("INSERT", "t1", "bob", owner="bob", title="a", done=False)])
    check({})
    gateway.push(BOB, "bob", [delta("UPDATE", "t1", "bob", owner="alice")])  # appears
    check({("todos", "t1"): {"owner": "alice", "title": "a", "done": False}})
    gateway.push(admin, "root", [delta("UPDATE", "t1", "root", title="b")])  # changes
    check({("todos", "t1"): {"owner": "alice", "title": "b", "done": False}})
    gateway.push(ALICE, "alice", [delta("UPDATE", "t1", "alice", owner="bob")])  # leaves
    check({})
    gateway.push(BOB, "bob", [delta("UPDATE", "t1", "bob", owner="alice", done=True)])  # back
    check({("todos", "t1"): {"owner": "alice", "title": "b", "done": True}})
    gateway.push(ALICE, "alice", [delta("DELETE", "t1", "alice")])
    check({})
    gateway.push(admin, "root", [delta("INSERT", "t1", "root", owner="alice", title="new")])
    check({("todos", "t1"): {"owner": "alice", "title": "new"}})  # revived: older cells null
    set_rules(gateway, {"version": 1, "buckets": [{"name": "none", "tables": [], "filters": [
        {"column": "owner", "op": "eq", "value": "nobody"}]}]})
    check({})
    set_rules(gateway, OWNER_RULES)
    check({("todos", "t1"): {"owner": "alice", "title": "new"}})
