"""The action dispatcher: params checked against the schema, each key run at most once (also
under concurrency and across dispatcher instances sharing a store), retryable failures not
remembered, remembered results expiring after the TTL."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from lakesync.api.actions import Action, ActionDispatcher
from lakesync.api.store.base import HotLog
from lakesync.connectors import ActionDescriptor, ActionError, ActionHandler

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}},
    "required": ["n"],
    "additionalProperties": False,
}


class Counter(ActionHandler):
    """Counts executions; fails retryably ``flaky`` times first; ``n = 13`` is refused."""

    def __init__(self, flaky: int = 0) -> None:
        self.runs = 0
        self.flaky = flaky

    def descriptors(self) -> list[ActionDescriptor]:
        return [ActionDescriptor("bump", "add n", SCHEMA)]

    async def execute(self, action_type: str, params: Mapping[str, Any]) -> dict[str, Any]:
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


def act(n: Any, action_id: str = "a1", key: str | None = None, **kw: Any) -> Action:
    return Action(action_id, kw.get("connector", "counter"), kw.get("type", "bump"), {"n": n}, key)


def test_the_same_key_runs_once_even_concurrently_and_across_dispatchers(store: HotLog) -> None:
    handler = Counter()
    first, second = dispatcher(store, handler), dispatcher(store, handler)

    async def main() -> list[Any]:
        calls = [
            d.execute("gw1", "alice", act(1, f"id{i}", "k1"))
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
    again = asyncio.run(first.execute("gw1", "alice", act(1, "later", "k1")))
    assert (again.action_id, again.data, handler.runs) == ("later", {"run": 1}, 1), again
    # The key is the client's: another client's same key runs.
    asyncio.run(first.execute("gw1", "bob", act(1, "b", "k1")))
    assert handler.runs == 2


def test_retryable_failures_are_not_remembered_and_refusals_are(store: HotLog) -> None:
    handler = Counter(flaky=2)
    d = dispatcher(store, handler)
    outcomes = [asyncio.run(d.execute("gw1", "alice", act(5))) for _ in range(4)]
    assert [(o.code, o.retryable) for o in outcomes[:2]] == [("ACTION_FAILED", True)] * 2
    assert outcomes[2].data == {"run": 3} and outcomes[3].data == {"run": 3}
    assert handler.runs == 3
    refused = [asyncio.run(d.execute("gw1", "alice", act(13, "x"))) for _ in range(2)]
    assert refused[0] == refused[1] and refused[0].code == "ACTION_FAILED"
    assert not refused[0].retryable and handler.runs == 4


def test_remembered_results_expire_after_the_ttl(store: HotLog) -> None:
    now = [1000.0]
    handler = Counter()
    d = dispatcher(store, handler, ttl=60, clock=lambda: now[0])
    asyncio.run(d.execute("gw1", "alice", act(1)))
    now[0] += 59
    asyncio.run(d.execute("gw1", "alice", act(1)))
    assert handler.runs == 1
    now[0] += 2
    asyncio.run(d.execute("gw1", "alice", act(1)))
    assert handler.runs == 2


def test_bad_params_unknown_connectors_and_types_are_clear_failures(store: HotLog) -> None:
    handler = Counter()
    d = dispatcher(store, handler)
    bad = asyncio.run(d.execute("gw1", "alice", act(-1)))
    assert bad.code == "VALIDATION_ERROR" and "n" in (bad.message or "") and not bad.retryable
    extra = Action("a2", "counter", "bump", {"n": 1, "zzz": 2})
    assert asyncio.run(d.execute("gw1", "alice", extra)).code == "VALIDATION_ERROR"
    assert asyncio.run(d.execute("gw1", "alice", act(1, connector="nope"))).code == "NOT_FOUND"
    unknown = asyncio.run(d.execute("gw1", "alice", act(1, type="explode")))
    assert unknown.code == "NOT_FOUND" and "bump" in (unknown.message or "")
    assert asyncio.run(d.execute("gw2", "alice", act(1))).code == "NOT_FOUND"
    assert handler.runs == 0
    assert list(d.discover("gw1")) == ["counter"] and d.discover("gw2") == {}


def test_expired_records_are_deleted_from_the_store(store: HotLog) -> None:
    now = [1000.0]
    handler = Counter(flaky=1)
    d = dispatcher(store, handler, ttl=60, clock=lambda: now[0], sweep_every=30)
    asyncio.run(d.execute("gw1", "alice", act(1, "a1", "k1")))  # retryable: released
    assert store.list_docs("gw1", "action-result") == {}  # swept by the first sweep
    asyncio.run(d.execute("gw1", "alice", act(1, "a2", "k2")))  # done at 1000
    asyncio.run(d.execute("gw1", "alice", act(13, "a3", "k3")))  # refused at 1000
    held = store.list_docs("gw1", "action-result")
    assert sorted(b["state"] for b in held.values()) == ["done", "done"]
    now[0] += 40  # a sweep is due; the results still live
    asyncio.run(d.execute("gw1", "alice", act(2, "a4", "k4")))  # done at 1040
    assert sorted(b["at"] for b in store.list_docs("gw1", "action-result").values()) == [
        1000.0,
        1000.0,
        1040.0,
    ]
    now[0] += 30  # 1070: k2 and k3 expired (60 s), k4 not; the sweep is due again
    asyncio.run(d.execute("gw1", "bob", act(3, "b1", "k1")))
    left = store.list_docs("gw1", "action-result")
    assert sorted(b["at"] for b in left.values()) == [1040.0, 1070.0]
    # The deleted key runs again; the live one replays.
    runs = handler.runs
    asyncio.run(d.execute("gw1", "alice", act(1, "a5", "k2")))
    asyncio.run(d.execute("gw1", "alice", act(2, "a6", "k4")))
    assert handler.runs == runs + 1
