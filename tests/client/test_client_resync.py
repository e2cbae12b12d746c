"""A client offline for longer than the gateway keeps its hot log re-syncs from the checkpoint by
itself, keeping its pending writes; a current client notices nothing.

The gateway runs in this process (real HTTP) on a store the test also holds
(:mod:`tests.client.client_thread_gateway`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from lakesync.client import LakeSyncClient
from lakesync.client._types import Event
from tests.api.helpers import HANDOVER_OWNER_RULES, auth, delta, token
from tests.client.client_thread_gateway import ThreadGateway


def _rows(c: LakeSyncClient) -> list[dict[str, Any]]:
    return c.query("select row_id, owner, title, done from todos order by row_id")


@pytest.mark.parametrize("transport", ["http", "websocket"])
@pytest.mark.parametrize("rules", [False, True])
def test_an_expired_cursor_resyncs_from_the_checkpoint_keeping_pending_writes(
    thread_gateway: ThreadGateway,
    tmp_path: Path,
    rules: bool,
    transport: Literal["http", "websocket"],
) -> None:
    gateway = thread_gateway
    if rules:
        r = httpx.post(
            f"{gateway.url}/v1/admin/sync-rules/gw1",
            json=HANDOVER_OWNER_RULES,
            headers=auth(token("root", role="admin")),
        )
        assert r.status_code == 200
    # Over the WebSocket the expired cursor is the pull's close code 4410; the checkpoint
    # itself is always read over HTTP.
    alice = gateway.client(tmp_path / "alice.db", "alice", transport)
    carol = gateway.client(tmp_path / "carol.db", "carol", transport)
    events: list[Event] = []
    alice.on("*", events.append)
    carol.on("*", events.append)
    for i in range(6):
        alice.upsert("todos", f"a{i}", {"owner": "alice", "title": f"t{i}", "done": False})
    gateway.admin_push(delta("INSERT", "g1", "root", owner="alice", title="given"))
    alice.sync()
    carol.sync()
    assert any(r["row_id"] == "g1" for r in _rows(alice))

    # Alice goes offline and edits; meanwhile others change her rows.
    alice.update("todos", "a0", {"title": "offline edit"})
    alice.delete("todos", "a5")
    gateway.admin_push(
        delta("UPDATE", "a0", "root", done=True),  # another column: both edits stay
        delta("DELETE", "a1", "root"),
        delta("UPDATE", "a2", "root", owner="bob"),  # leaves alice's view under rules
        delta("UPDATE", "g1", "root", owner="bob"),  # so does a row she never wrote
        delta("INSERT", "a9", "root", owner="alice", title="new", done=False),
    )
    carol.sync()
    position = gateway.checkpoint_and_trim()
    gateway.admin_push(delta("UPDATE", "a3", "root", title="after the checkpoint"))

    carol.sync()  # a current client notices nothing
    assert not any(e.kind == "resync" for e in events)
    report = alice.sync()  # its cursor is older than the horizon: 410, then the checkpoint
    assert [e.kind for e in events if e.kind == "resync"] == ["resync"]
    assert alice.status.cursor >= position and report.pushed == 2

    fresh = gateway.client(tmp_path / "fresh.db", "alice")
    fresh.sync()
    assert _rows(alice) == _rows(fresh)
    by_id = {r["row_id"]: r for r in _rows(alice)}
    assert by_id["a0"]["title"] == "offline edit" and by_id["a0"]["done"] is True
    assert "a5" not in by_id and "a1" not in by_id and "a9" in by_id
    assert by_id["a3"]["title"] == "after the checkpoint"
    assert ("a2" in by_id) is ("g1" in by_id) is (not rules)
    for c in (alice, carol, fresh):
        c.close()
