"""The action dispatcher: params checked against the schema, each key run at most once (also
under concurrency and across dispatcher instances sharing a store), retryable failures not
remembered, remembered results expiring after the TTL, unknown outcomes never run again blindly,
only granted actions run."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from lakesync.api.actions import Action, ActionDispatcher
from lakesync.connector_specs import ActionGrant
from lakesync.connectors import ActionDescriptor, ActionError, ActionHandler
from lakesync.hotlog.base import HotLog

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}},
    "required": ["n"],
    "additionalProperties": False,
}


class Counter(ActionHandler):
    """Counts executions; fails retryably ``flaky`` times first; ``n = 13`` is refused."""

    grants = (ActionGrant("*"),)

    def __init__(self, flaky: int = 0) -> None:
        self.runs = 0
        self.flaky = flaky

    def descriptors(self) -> list[ActionDescriptor]:
        return [ActionDescriptor("bump", "add n", SCHEMA)]

    async def execute(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any]:
        self.runs += 1
        await asyncio.sleep(0.01)  # let concurrent requests overlap
        if self.flaky:
            self.flaky -= 1
            raise ActionError("ACTION_FAILED", "503 from upstream", True)
        if params["n"] == 13:
            raise ActionError("ACTION_FAILED", "400 from upstream: unlucky", False)
        return {"run": self.runs}


def dispatcher(store: HotLog, handler: ActionHandler, **kw: Any) -> ActionDispatcher:
    return ActionDispatcher(store, lambda gw: {"counter": handler} if gw == "gw1" else {}, **kw)


def who(sub: str, **claims: Any) -> dict[str, Any]:
    """A client token's claims."""
    return {"sub": sub, "gw": "gw1", "role": "client", **claims}


def act(n: Any, action_id: str = "a1", key: str | None = None, **kw: Any) -> Action:
    return Action(action_id, kw.get("connector", "counter"), kw.get("type", "bump"), {"n": n}, key)


def test_the_same_key_runs_once_even_concurrently_and_across_dispatchers(store: HotLog) -> None:
    handler = Counter()
    first, second = dispatcher(store, handler), dispatcher(store, handler)

    async def main() -> list[Any]:
        calls = [
            d.execute("gw1", who("alice"), act(1, f"id{i}", "k1"))
            for i, d in enumerate([first, second] * 5)
        ]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    assert handler.runs == 1
    done = [r for r in results if r.data is not None]
    busy = [r for r in results if r.code == "ACTION_IN_PROGRESS"]
    assert done and all(r.data == {"run": 1} for r in done)
    assert all(r.retryable for r in busy) and len(done) + len(busy) == 10
    # Later requests with the key replay the result under their own action id.
    again = asyncio.run(first.execute("gw1", who("alice"), act(1, "later", "k1")))
    assert (again.action_id, again.data, handler.runs) == ("later", {"run": 1}, 1), again
    # The key is the client's: another client's same key runs.
    asyncio.run(first.execute("gw1", who("bob"), act(1, "b", "k1")))
    assert handler.runs == 2


def test_retryable_failures_are_not_remembered_and_refusals_are(store: HotLog) -> None:
    handler = Counter(flaky=2)
    d = dispatcher(store, handler)
    outcomes = [asyncio.run(d.execute("gw1", who("alice"), act(5))) for _ in range(4)]
    assert [(o.code, o.retryable) for o in outcomes[:2]] == [("ACTION_FAILED", True)] * 2
    assert outcomes[2].data == {"run": 3} and outcomes[3].data == {"run": 3}
    assert handler.runs == 3
    refused = [asyncio.run(d.execute("gw1", who("alice"), act(13, "x"))) for _ in range(2)]
    assert refused[0] == refused[1] and refused[0].code == "ACTION_FAILED"
    assert not refused[0].retryable and handler.runs == 4


def test_remembered_results_expire_after_the_ttl(store: HotLog) -> None:
    now = [1000.0]
    handler = Counter()
    d = dispatcher(store, handler, ttl=60, clock=lambda: now[0])
    asyncio.run(d.execute("gw1", who("alice"), act(1)))
    now[0] += 59
    asyncio.run(d.execute("gw1", who("alice"), act(1)))
    assert handler.runs == 1
    now[0] += 2
    asyncio.run(d.execute("gw1", who("alice"), act(1)))
    assert handler.runs == 2


def test_bad_params_unknown_connectors_and_types_are_clear_failures(store: HotLog) -> None:
    handler = Counter()
    d = dispatcher(store, handler)
    bad = asyncio.run(d.execute("gw1", who("alice"), act(-1)))
    assert bad.code == "VALIDATION_ERROR" and "n" in (bad.message or "") and not bad.retryable
    extra = Action("a2", "counter", "bump", {"n": 1, "zzz": 2})
    assert asyncio.run(d.execute("gw1", who("alice"), extra)).code == "VALIDATION_ERROR"
    assert asyncio.run(d.execute("gw1", who("alice"), act(1, connector="nope"))).code == "NOT_FOUND"
    unknown = asyncio.run(d.execute("gw1", who("alice"), act(1, type="explode")))
    assert unknown.code == "NOT_FOUND" and "bump" in (unknown.message or "")
    assert asyncio.run(d.execute("gw2", who("alice"), act(1))).code == "NOT_FOUND"
    assert handler.runs == 0
    assert list(d.discover("gw1", who("alice"))) == ["counter"]
    assert d.discover("gw2", who("alice")) == {}


def test_expired_records_are_deleted_from_the_store(store: HotLog) -> None:
    now = [1000.0]
    handler = Counter(flaky=1)
    d = dispatcher(store, handler, ttl=60, clock=lambda: now[0], sweep_every=30)
    asyncio.run(d.execute("gw1", who("alice"), act(1, "a1", "k1")))  # retryable: released
    assert store.list_docs("gw1", "action-result") == {}  # swept by the first sweep
    asyncio.run(d.execute("gw1", who("alice"), act(1, "a2", "k2")))  # done at 1000
    asyncio.run(d.execute("gw1", who("alice"), act(13, "a3", "k3")))  # refused at 1000
    held = store.list_docs("gw1", "action-result")
    assert sorted(b["state"] for b in held.values()) == ["done", "done"]
    now[0] += 40  # a sweep is due; the results still live
    asyncio.run(d.execute("gw1", who("alice"), act(2, "a4", "k4")))  # done at 1040
    assert sorted(b["at"] for b in store.list_docs("gw1", "action-result").values()) == [
        1000.0,
        1000.0,
        1040.0,
    ]
    now[0] += 30  # 1070: k2 and k3 expired (60 s), k4 not; the sweep is due again
    asyncio.run(d.execute("gw1", who("bob"), act(3, "b1", "k1")))
    left = store.list_docs("gw1", "action-result")
    assert sorted(b["at"] for b in left.values()) == [1040.0, 1070.0]
    # The deleted key runs again; the live one replays.
    runs = handler.runs
    asyncio.run(d.execute("gw1", who("alice"), act(1, "a5", "k2")))
    asyncio.run(d.execute("gw1", who("alice"), act(2, "a6", "k4")))
    assert handler.runs == runs + 1


class Remote(ActionHandler):
    """A system that performs ``make`` and keeps what it made by key; its replies can be lost
    (``lose`` the next ones: made, then an unknown outcome), and it can ``crash`` the handler
    after making. ``lookups`` says whether the handler can reconcile."""

    def __init__(self, lookups: bool = True, reconcile_after: float = 0.0) -> None:
        self.made: dict[str, int] = {}
        self.runs = 0
        self.looked_up = 0
        self.lose = 0
        self.crash = False
        self.lookups = lookups
        self.reconcile_after = reconcile_after
        self.grants = (ActionGrant("make", {"team": ["ops", "support"]}),)

    def descriptors(self) -> list[ActionDescriptor]:
        return [ActionDescriptor("make", "make one", SCHEMA), ActionDescriptor("drop", "x", SCHEMA)]

    async def execute(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any]:
        self.runs += 1
        self.made[key] = self.made.get(key, 0) + 1
        if self.crash:
            raise RuntimeError("the reply could not be parsed")
        if self.lose:
            self.lose -= 1
            raise ActionError(
                "ACTION_OUTCOME_UNKNOWN", "no reply", self.lookups, outcome_unknown=True,
                detail="ReadTimeout from https://internal.example/api",
            )
        return {"made": self.made[key]}

    async def reconcile(
        self, action_type: str, params: Mapping[str, Any], key: str
    ) -> dict[str, Any] | None:
        if not self.lookups:
            return await super().reconcile(action_type, params, key)
        self.looked_up += 1
        return {"made": self.made[key], "found": True} if key in self.made else None


def remote_dispatcher(store: HotLog, handler: ActionHandler, **kw: Any) -> ActionDispatcher:
    return ActionDispatcher(store, lambda gw: {"sys": handler}, **kw)


def make(action_id: str, key: str = "k1") -> Action:
    return Action(action_id, "sys", "make", {"n": 1}, key)


OPS = who("alice", team="ops")


def test_an_unknown_outcome_is_looked_up_not_run_again(store: HotLog) -> None:
    now = [1000.0]
    handler = Remote(reconcile_after=30)
    d = remote_dispatcher(store, handler, clock=lambda: now[0])
    handler.lose = 1
    first = asyncio.run(d.execute("gw1", OPS, make("a1")))
    assert (first.code, first.retryable) == ("ACTION_OUTCOME_UNKNOWN", True), first
    assert "internal.example" not in (first.message or "")  # the detail is the operator's
    [record] = asyncio.run(d.records("gw1"))
    assert record["state"] == "unknown" and "internal.example" in record["detail"]
    assert (record["clientId"], record["idempotencyKey"], record["actionType"]) == (
        "alice", "k1", "make")
    # Too early to tell (the system may still be working on it): neither run nor looked up.
    early = asyncio.run(d.execute("gw1", OPS, make("a2")))
    assert (early.code, early.retryable) == ("ACTION_OUTCOME_UNKNOWN", True)
    assert (handler.runs, handler.looked_up) == (1, 0)
    now[0] += 31
    found = asyncio.run(d.execute("gw1", OPS, make("a3")))
    assert found.data == {"made": 1, "found": True} and handler.runs == 1
    again = asyncio.run(d.execute("gw1", OPS, make("a4")))
    assert again.data == found.data and (handler.runs, handler.looked_up) == (1, 1)
    assert handler.made == {next(iter(handler.made)): 1}  # made once


def test_an_unknown_outcome_that_did_not_happen_runs_once_more(store: HotLog) -> None:
    handler = Remote()
    d = remote_dispatcher(store, handler)
    handler.lose = 1
    asyncio.run(d.execute("gw1", OPS, make("a1")))
    handler.made.clear()  # the system had not acted on it after all
    done = asyncio.run(d.execute("gw1", OPS, make("a2")))
    assert done.data == {"made": 1} and handler.runs == 2 and handler.looked_up == 1


def test_without_look_ups_an_unknown_outcome_is_final(store: HotLog) -> None:
    handler = Remote(lookups=False)
    d = remote_dispatcher(store, handler)
    handler.lose = 1
    first = asyncio.run(d.execute("gw1", OPS, make("a1")))
    assert (first.code, first.retryable) == ("ACTION_OUTCOME_UNKNOWN", False)
    again = asyncio.run(d.execute("gw1", OPS, make("a2")))
    assert again.code == "ACTION_OUTCOME_UNKNOWN" and handler.runs == 1


def test_a_handler_crash_or_a_dead_claim_is_an_unknown_outcome(store: HotLog) -> None:
    now = [1000.0]
    handler = Remote()
    d = remote_dispatcher(store, handler, clock=lambda: now[0], claim_timeout=60)
    handler.crash = True
    crashed = asyncio.run(d.execute("gw1", OPS, make("a1")))
    assert (crashed.code, crashed.retryable) == ("ACTION_OUTCOME_UNKNOWN", True)
    handler.crash = False
    assert asyncio.run(d.execute("gw1", OPS, make("a2"))).data == {"made": 1, "found": True}
    assert handler.runs == 1
    # A process that died while running k2 left its claim; once the claim is dead, the next
    # attempt looks k2 up first (it had been made), it does not run it again.
    asyncio.run(d.execute("gw1", OPS, make("b1", "k2")))
    runs = handler.runs
    [(name, doc)] = [
        (n, b) for n, b in store.list_docs("gw1", "action-result").items()
        if b["idempotencyKey"] == "k2"
    ]
    store.put_doc("gw1", "action-result", name, doc | {"state": "running", "claim": "dead"})
    busy = asyncio.run(d.execute("gw1", OPS, make("b2", "k2")))
    assert busy.code == "ACTION_IN_PROGRESS" and handler.runs == runs
    now[0] += 61
    taken = asyncio.run(d.execute("gw1", OPS, make("b3", "k2")))
    assert taken.data == {"made": 1, "found": True} and handler.runs == runs


def test_only_granted_actions_are_listed_and_run(store: HotLog) -> None:
    handler = Remote()
    d = remote_dispatcher(store, handler)
    nobody, support = who("bob"), who("carol", team=["web", "support"])
    admin = {"sub": "root", "gw": "gw1", "role": "admin"}
    listed = {
        sub: {c: [t.action_type for t in ts] for c, ts in d.discover("gw1", c_).items()}
        for sub, c_ in [("bob", nobody), ("carol", support), ("root", admin)]
    }
    assert listed == {"bob": {}, "carol": {"sys": ["make"]}, "root": {"sys": ["make", "drop"]}}
    refused = asyncio.run(d.execute("gw1", nobody, make("x1")))
    assert (refused.code, refused.retryable) == ("FORBIDDEN", False)
    drop = Action("x2", "sys", "drop", {"n": 1})
    assert asyncio.run(d.execute("gw1", support, drop)).code == "FORBIDDEN"
    assert handler.runs == 0
    assert asyncio.run(d.execute("gw1", support, make("x3"))).data is not None
    assert asyncio.run(d.execute("gw1", admin, drop)).data is not None
    # A handler with no grants: admin tokens only.
    closed = Counter()
    closed.grants = ()
    d = dispatcher(store, closed)
    assert d.discover("gw1", nobody) == {} and list(d.discover("gw1", admin)) == ["counter"]
    assert asyncio.run(d.execute("gw1", nobody, act(1))).code == "FORBIDDEN"
    assert asyncio.run(d.execute("gw1", admin, act(1))).data == {"run": 1}
