"""Row-level write access under concurrency: the check runs in the append's transaction, under
the writers' lock, so a write that another gateway process makes between a push's arrival and
its append is seen by the check (it once read the rows before taking the lock).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.hlc import HLC
from lakesync.hotlog.postgres import PostgresHotLog
from tests.api.helpers import Gateway, Replica, delta, make_settings, now_hlc, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres

pytestmark = pytest.mark.postgres

HANDOVER_RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            "handover": True,
        }
    ],
}


class InterleavedHotLog(PostgresHotLog):
    """A PostgreSQL store whose next append first lets ``before_append`` run: another gateway
    process's push, landing after this push arrived but before its append takes the lock."""

    before_append: Any = None

    def append(self, *args: Any, **kwargs: Any) -> Any:
        hook, self.before_append = self.before_append, None
        if hook is not None:
            hook()
        return super().append(*args, **kwargs)


@pytest.fixture
def two_gateways(tmp_path: Path) -> Iterator[tuple[Gateway, Gateway, InterleavedHotLog]]:
    """Two gateway apps (as two processes) sharing one PostgreSQL store schema."""
    require_postgres()
    schema = fresh_pg_schema()
    first = InterleavedHotLog(PG_DSN, HLC(), schema=schema)
    second = PostgresHotLog(PG_DSN, HLC(), schema=schema)
    try:
        with (
            TestClient(create_app(make_settings(tmp_path / "a"), store=first)) as a,
            TestClient(create_app(make_settings(tmp_path / "b"), store=second)) as b,
        ):
            yield Gateway(a), Gateway(b), first
    finally:
        first.close()
        second.close()
        drop_pg_schema(schema)


def test_a_row_handed_over_meanwhile_cannot_be_written_by_its_old_owner(
    two_gateways: tuple[Gateway, Gateway, InterleavedHotLog],
) -> None:
    """Alice's laptop (gateway A) edits her row while her phone (gateway B) hands it to bob; B
    commits first. A's check must see bob's row and refuse, not store alice's edit into it."""
    a, b, store = two_gateways
    alice, bob = token("alice"), token("bob")
    assert a.admin("POST", "/v1/admin/sync-rules/gw1", json=HANDOVER_RULES).status_code == 200
    base = now_hlc()
    own = delta("INSERT", "r1", "alice", base, owner="alice", title="draft")
    assert a.push(alice, "alice", [own]).status_code == 200
    handed: list[int] = []
    # From the other process, in another thread (as a real concurrent push would run).
    store.before_append = lambda: handed.append(
        _in_thread(
            lambda: (
                b.push(
                    alice, "alice", [delta("UPDATE", "r1", "alice", base + 1, owner="bob")]
                ).status_code
            )
        )
    )
    edit = delta("UPDATE", "r1", "alice", base + 2, title="alice's secret")
    r = a.push(alice, "alice", [edit])
    assert handed == [200]
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "FORBIDDEN" and "(USING)" in r.json()["error"]
    mine = Replica()
    b.sync(bob, "bob", mine)
    assert mine.rows() == {("todos", "r1"): {"owner": "bob", "title": "draft"}}


def _in_thread(fn: Any) -> Any:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join(timeout=60)
    assert out, "the other gateway's push did not finish"
    return out[0]
