"""Trimming the hot log forgets no eviction: a checkpoint still removes the rows a client wrote
that left its view, and a pull still removes a row that was in the view at the client's cursor
though the deltas that put it there were trimmed. A real gateway over HTTP, on each store, for a
client with view evictions and one applying whole rows (the TypeScript client's semantics).
"""

from __future__ import annotations

import pytest

from lakesync.api.services import initial_sync
from lakesync.hotlog.base import HotLog
from lakesync.lakehouse.checkpoint_builder import write_checkpoint
from tests.api.conftest import Served
from tests.api.helpers import HANDOVER_OWNER_RULES, Replica, WholeRowReplica, delta, token

ALICE, ROOT = token("alice"), token("root", role="admin")
REPLICAS = [Replica, WholeRowReplica]


@pytest.fixture
def ruled(served: Served) -> Served:
    r = served.gateway.admin("POST", "/v1/admin/sync-rules/gw1", json=HANDOVER_OWNER_RULES)
    assert r.status_code == 200, r.text
    return served


def checkpoint_and_trim(store: HotLog) -> int:
    """What the lake job does after a pipeline run, with a zero retention."""
    page = store.read_all_rows("gw1")
    assert write_checkpoint(store, "gw1", page.head, sorted(page.rows.items())) is not None
    store.mark_flushed(page.head)
    assert store.trim_log("gw1", page.head) > 0
    return page.head


@pytest.mark.parametrize("at_once", [10_000, 2], ids=["read-once", "per-chunk"])
@pytest.mark.parametrize("replica_type", REPLICAS)
def test_a_checkpoint_after_trimming_removes_rows_the_client_wrote(
    ruled: Served,
    replica_type: type[Replica | WholeRowReplica],
    at_once: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The rows a client wrote are read once per stream when few, else looked up per chunk.
    monkeypatch.setattr(initial_sync, "WRITTEN_AT_ONCE", at_once)
    gateway = ruled.gateway
    alice = replica_type()
    mine = [delta("INSERT", f"t{i}", "alice", owner="alice", title="mine") for i in range(3)]
    assert gateway.push(ALICE, "alice", mine).status_code == 200
    for d in mine:  # written and applied locally, never pulled: the cursor is still 0
        alice.state.apply(d) if isinstance(alice, Replica) else alice.write(d)
    gateway.push(ROOT, "root", [delta("UPDATE", "t1", "root", owner="bob")])
    gateway.push(ROOT, "root", [delta("DELETE", "t2", "root")])
    checkpoint_and_trim(ruled.store)
    gateway.load_checkpoint(ALICE, alice)
    gateway.sync(ALICE, "alice", alice)
    assert alice.rows() == {("todos", "t0"): {"owner": "alice", "title": "mine"}}


@pytest.mark.parametrize("replica_type", REPLICAS)
def test_a_pull_after_trimming_removes_a_row_that_was_in_the_view_at_the_cursor(
    ruled: Served, replica_type: type[Replica | WholeRowReplica]
) -> None:
    gateway = ruled.gateway
    gateway.push(ROOT, "root", [delta("INSERT", f"t{i}", "root", owner="alice") for i in range(3)])
    gateway.push(ROOT, "root", [delta("UPDATE", "t0", "root", title="kept")])
    alice = replica_type()
    gateway.sync(ALICE, "alice", alice)
    assert len(alice.rows()) == 3
    assert checkpoint_and_trim(ruled.store) <= alice.cursor  # its cursor has not expired
    gateway.push(ROOT, "root", [delta("UPDATE", "t1", "root", owner="bob")])
    gateway.push(ROOT, "root", [delta("UPDATE", "t2", "root", title="changed")])
    gateway.sync(ALICE, "alice", alice)
    assert alice.rows() == {
        ("todos", "t0"): {"owner": "alice", "title": "kept"},
        ("todos", "t2"): {"owner": "alice", "title": "changed"},
    }
