"""Sync rules on merged state (SPEC §8): what reaches whom, write access, rule changes."""

from __future__ import annotations

from typing import Any

from api.services.resyncs import ResyncPages
from lakesync.rules import parse_rules, visible
from tests.api.helpers import Gateway, PlainReplica, Replica, auth, delta, token

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
ALICE, BOB, CAROL = token("alice"), token("bob"), token("carol")


def set_rules(gateway: Gateway, rules: dict[str, Any]) -> None:
    r = gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=rules)
    assert r.status_code == 200, r.text


def expected(
    rows: dict[tuple[str, str], dict[str, Any]], rules: dict[str, Any], sub: str
) -> dict[tuple[str, str], dict[str, Any]]:
    parsed = parse_rules(rules)
    return {k: v for k, v in rows.items() if visible(parsed, {"sub": sub}, k[0], v)}


def test_delete_partial_update_and_ownership_change_reach_the_right_clients(
    gateway: Gateway,
) -> None:
    set_rules(gateway, OWNER_RULES)
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


def test_snapshot_deltas_are_valid_wire_deltas(gateway: Gateway) -> None:
    set_rules(gateway, OWNER_RULES)
    gateway.push(ALICE, "alice", [delta("INSERT", "t1", "alice", owner="alice", n=1.5)])
    body = gateway.http.get("/v1/sync/gw1/pull", params={"since": "0"}, headers=auth(ALICE)).json()
    rep = Replica()
    rep.apply(body["deltas"])  # read as the gateway reads a push: every deltaId recomputed
    assert [d["op"] for d in body["deltas"]] == ["DELETE", "INSERT"]
    assert rep.rows() == {("todos", "t1"): {"owner": "alice", "n": 1.5}}


def test_rows_a_client_never_saw_are_not_mentioned(gateway: Gateway) -> None:
    set_rules(gateway, OWNER_RULES)
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
    set_rules(gateway, OWNER_RULES)
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
    set_rules(
        gateway,
        {
            "version": 1,
            "buckets": [
                {
                    "name": "none",
                    "tables": [],
                    "filters": [{"column": "owner", "op": "eq", "value": "nobody"}],
                }
            ],
        },
    )
    check({})
    set_rules(gateway, OWNER_RULES)
    check({("todos", "t1"): {"owner": "alice", "title": "new"}})


def _first_sync_pages(
    gateway: Gateway, tok: str, client_id: str, limit: int, forget_after: int | None = None
) -> list[dict[str, Any]]:
    """A fresh client's pull from 0 page by page, as a SPEC client follows it (serverHlc and
    hasMore only); ``forget_after`` pages, the gateway loses its continuation records."""
    pages: list[dict[str, Any]] = []
    cursor = 0
    while True:
        r = gateway.pull_page(tok, client_id, cursor, limit)
        assert r.status_code == 200, r.text
        pages.append(r.json())
        cursor = int(pages[-1]["serverHlc"])
        if not pages[-1]["hasMore"]:
            return pages
        if forget_after is not None and len(pages) == forget_after:
            gateway.http.app.state.service.resyncs = ResyncPages()
        assert len(pages) < 1000, "the first sync never finished"


def _fill_alice_and_bob(gateway: Gateway) -> None:
    set_rules(gateway, OWNER_RULES)
    mine = [delta("INSERT", f"a{i}", "alice", owner="alice", title=f"{i}") for i in range(7)]
    # A row alice wrote and gave away: her first sync evicts it, and nothing else of bob's.
    mine.append(delta("INSERT", "given", "alice", owner="bob", title="yours"))
    assert gateway.push(ALICE, "alice", mine).status_code == 200
    theirs = [delta("INSERT", f"b{i}", "bob", owner="bob", title=f"{i}") for i in range(5)]
    assert gateway.push(BOB, "bob", theirs).status_code == 200


def test_a_fresh_pull_under_rules_is_paged_by_limit(gateway: Gateway) -> None:
    _fill_alice_and_bob(gateway)
    (whole,) = _first_sync_pages(gateway, ALICE, "alice", 10_000)
    pages = _first_sync_pages(gateway, ALICE, "alice", 3)
    # Each of her rows is an eviction and an INSERT, the given row an eviction alone: seven
    # pages of at most 3 deltas (a row's snapshot is never split across pages).
    assert len(pages) == 7
    assert all(len(p["deltas"]) <= 3 for p in pages)
    assert [p["hasMore"] for p in pages] == [True] * 6 + [False]
    cursors = [int(p["serverHlc"]) for p in pages]
    assert cursors == sorted(set(cursors))
    # The pages hold exactly the unpaged reply, and end at the same position.
    paged = [d for p in pages for d in p["deltas"]]
    assert sorted(d["deltaId"] for d in paged) == sorted(d["deltaId"] for d in whole["deltas"])
    assert cursors[-1] == int(whole["serverHlc"])
    assert not any(d["rowId"].startswith("b") for d in paged)
    rep = Replica()
    rep.apply(paged)
    assert set(rep.rows()) == {("todos", f"a{i}") for i in range(7)}


def test_rows_changed_between_pages_of_a_first_sync_converge(gateway: Gateway) -> None:
    _fill_alice_and_bob(gateway)
    rep = Replica()
    r = gateway.pull_page(ALICE, "alice", 0, 4).json()
    assert r["hasMore"]
    rep.apply(r["deltas"])
    rep.cursor = int(r["serverHlc"])
    sent = {d["rowId"] for d in r["deltas"]}
    # Meanwhile: a row she holds leaves her view, one not sent yet too, bob gives her a row.
    held, unsent = sorted(sent - {"given"})[0], "a6"
    assert unsent not in sent
    gateway.push(ALICE, "alice", [delta("UPDATE", held, "alice", owner="bob")])
    gateway.push(ALICE, "alice", [delta("UPDATE", unsent, "alice", owner="bob")])
    gateway.push(BOB, "bob", [delta("UPDATE", "b0", "bob", owner="alice")])
    gateway.sync(ALICE, "alice", rep, limit=4)
    assert set(rep.rows()) == {
        ("todos", f"a{i}") for i in range(7) if f"a{i}" not in (held, unsent)
    } | {("todos", "b0")}


def test_a_continuation_the_gateway_forgot_is_one_full_resync(gateway: Gateway) -> None:
    _fill_alice_and_bob(gateway)
    pages = _first_sync_pages(gateway, ALICE, "alice", 3, forget_after=2)
    # Two pages, then the rest (the whole view again) in one reply: same rows in the end.
    assert len(pages) == 3
    rep = Replica()
    for p in pages:
        rep.apply(p["deltas"])
    assert set(rep.rows()) == {("todos", f"a{i}") for i in range(7)}
    paged = {d["rowId"] for p in pages for d in p["deltas"]}
    assert not any(r.startswith("b") for r in paged)
