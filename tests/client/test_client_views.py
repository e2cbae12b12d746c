"""The Python client's replica follows its view under sync rules: a row that leaves it is gone
after one sync(), also when the deltas that put it in the view have been trimmed. A real gateway
over HTTP on a store the test holds (:mod:`tests.client.client_thread_gateway`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import httpx
import pytest

from lakesync.client import LakeSyncClient
from tests.api.helpers import HANDOVER_OWNER_RULES, auth, delta, token
from tests.client.client_thread_gateway import ThreadGateway


@pytest.fixture
def gateway(thread_gateway: ThreadGateway) -> ThreadGateway:
    r = httpx.post(
        f"{thread_gateway.url}/v1/admin/sync-rules/gw1",
        json=HANDOVER_OWNER_RULES,
        headers=auth(token("root", role="admin")),
    )
    assert r.status_code == 200, r.text
    return thread_gateway


def _ids(c: LakeSyncClient) -> list[str]:
    return [r["row_id"] for r in c.query("select row_id from todos order by row_id")]


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_a_row_the_client_gives_away_leaves_its_replica_on_that_sync(
    gateway: ThreadGateway, tmp_path: Path, transport: Literal["http", "websocket"]
) -> None:
    alice = gateway.client(tmp_path / "alice.db", "alice", transport)
    alice.insert("todos", "t1", {"owner": "alice", "title": "mine"})
    alice.insert("todos", "t2", {"owner": "alice", "title": "kept"})
    alice.sync()
    alice.update("todos", "t1", {"owner": "bob"})
    alice.sync()
    assert _ids(alice) == ["t2"]
    alice.close()


def test_a_pull_after_trimming_removes_a_row_that_was_in_the_view_at_the_cursor(
    gateway: ThreadGateway, tmp_path: Path
) -> None:
    gateway.admin_push(
        delta("INSERT", "t1", "root", owner="alice", title="given"),
        delta("INSERT", "t2", "root", owner="alice", title="kept"),
    )
    alice = gateway.client(tmp_path / "alice.db", "alice")
    alice.sync()
    assert _ids(alice) == ["t1", "t2"]
    position = gateway.checkpoint_and_trim()  # everything alice pulled leaves the hot log
    assert alice.status.cursor >= position
    gateway.admin_push(delta("UPDATE", "t1", "root", owner="bob"))
    alice.sync()  # its cursor is not expired: an ordinary pull
    assert _ids(alice) == ["t2"]
    alice.close()
