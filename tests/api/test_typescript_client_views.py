"""The original TypeScript client (run under bun over HTTP, tests/js/lakesync_ts_probe.ts,
``scriptScenario``) under the rules ``lakesync init`` writes (``owner = jwt:sub``): its first sync
on a gateway with a published checkpoint, and a row it hands to another user, which must leave
its replica although it sets its cursor to a push answer's or a broadcast's ``serverHlc`` and
pulls one page per sync (docs/protocol.md §6, §8, §9 and §12)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync.api.app import create_app
from lakesync.hlc import HLC, encode
from lakesync.hotlog.base import HotLog
from lakesync.hotlog.sqlite import SqliteHotLog
from tests.api.helpers import Gateway, auth, checkpoint_now, delta, make_settings, token
from tests.gateway_process import serve_in_thread
from tests.lakesync_ts import require_ts_client, run_script
from tests.wire_json import as_json

pytestmark = pytest.mark.slow

GW = "gw1"
SCHEMA = {"table": "todos", "columns": [{"name": "title", "type": "string"},
                                        {"name": "owner", "type": "string"}]}
OWNER_RULES = {  # as `lakesync init` writes them, with handover: a client may give rows away
    "version": 1,
    "buckets": [{"name": "mine", "tables": ["todos"],
                 "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
                 "handover": True}],
}
ADMIN = token("root", role="admin")
TOKENS = {sub: token(sub) for sub in ("alice", "bob")}
RETENTION_S = 7 * 24 * 3600  # server.hot_log_retention's default


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HotLog]:
    s = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    yield s
    s.close()


@pytest.fixture
def served(tmp_path: Path, store: HotLog) -> Iterator[tuple[str, Gateway]]:
    """A gateway on ``store`` over real HTTP with the owner rules; its URL and a client of it."""
    require_ts_client()
    with serve_in_thread(create_app(make_settings(tmp_path), store=store)) as url, \
            httpx.Client(base_url=url, timeout=60) as http:
        for path, body in ((f"/v1/admin/schema/{GW}", SCHEMA),
                           (f"/v1/admin/sync-rules/{GW}", OWNER_RULES)):
            r = http.post(path, json=body, headers=auth(ADMIN))
            assert r.status_code == 200, r.text
        yield url, Gateway(http)


def push_body(client: str, rows: list[tuple[str, str]], table: str = "todos") -> dict[str, Any]:
    """A push of ``client`` inserting each ``(row id, owner)`` with a title."""
    deltas = [delta("INSERT", row, client, table=table, title=f"t-{row}", owner=owner)
              for row, owner in rows]
    return {"clientId": client, "deltas": [as_json(d) for d in deltas]}


def script(url: str, steps: list[dict[str, Any]], ws: bool = False) -> dict[str, Any]:
    return run_script({"url": url, "gw": GW, "tokens": TOKENS, "ws": ws,
                       "columns": ["title", "owner"], "steps": steps})


def row(row_id: str, owner: str) -> dict[str, str]:
    return {"id": row_id, "title": f"t-{row_id}", "owner": owner}


@pytest.mark.parametrize("ws", [False, True], ids=["HTTP", "WebSocket"])
@pytest.mark.parametrize("trimmed", [False, True], ids=["nothing trimmed", "trimmed"])
def test_the_first_sync_on_a_gateway_with_a_published_checkpoint(
    served: tuple[str, Gateway], store: HotLog, trimmed: bool, ws: bool
) -> None:
    url, gateway = served
    for client, rows in (("alice", [("a1", "alice"), ("a2", "alice")]), ("bob", [("b1", "bob")])):
        r = gateway.http.post(f"/v1/sync/{GW}/push", json=push_body(client, rows),
                              headers=auth(TOKENS[client]))
        assert r.status_code == 200, r.text
    # What the checkpoint job does after a pipeline run: publish, then trim what is older than
    # the retention (here nothing) or, the second time, everything the checkpoint holds.
    head = checkpoint_now(store, GW)
    store.mark_flushed(head)
    cutoff = head if trimmed else encode(int((time.time() - RETENTION_S) * 1000), 0)
    assert (store.trim_log(GW, cutoff) > 0) is trimmed
    assert (store.trimmed_through(GW) > 0) is trimmed
    # A row after the checkpoint, which the first sync pulls from its position.
    r = gateway.http.post(f"/v1/sync/{GW}/push", json=push_body("alice", [("a3", "alice")]),
                          headers=auth(TOKENS["alice"]))
    assert r.status_code == 200, r.text

    result = script(url, [{"op": "sync", "client": "alice"}, {"op": "rows", "client": "alice"},
                          {"op": "sync", "client": "bob"}, {"op": "rows", "client": "bob"}], ws)

    alice, bob = (read["rows"] for read in result["rows"])
    assert alice == [row("a1", "alice"), row("a2", "alice"), row("a3", "alice")]
    assert bob == [row("b1", "bob")]
    # The cursors come from the checkpoint and the pull after it, never from a pull since 0.
    assert int(result["cursors"]["alice"]) > head


@pytest.mark.parametrize("ws", [False, True], ids=["HTTP", "WebSocket"])
@pytest.mark.parametrize(
    "others", [0, 1_200], ids=["alone", "behind 1,200 deltas of others"]
)
def test_a_row_handed_to_another_user_leaves_the_typescript_replica(
    served: tuple[str, Gateway], others: int, ws: bool
) -> None:
    url, _ = served
    # Between alice's syncs: ``others`` rows of bob's (more than a page of the client's pulls,
    # none of which alice sees) and as many of alice's written by an admin (pages she sees).
    noise: list[dict[str, Any]] = []
    for start in range(0, others, 600):
        ids = range(start, min(start + 600, others))
        noise.append({"op": "post", "path": f"/v1/sync/{GW}/push", "token": TOKENS["bob"],
                      "body": push_body("bob", [(f"b{i:05}", "bob") for i in ids])})
        noise.append({"op": "post", "path": f"/v1/sync/{GW}/push", "token": ADMIN,
                      "body": push_body("root", [(f"n{i:05}", "alice") for i in ids])})
    steps = [
        {"op": "sync", "client": "alice"},
        {"op": "insert", "client": "alice", "rowId": "r1",
         "data": {"title": "t-r1", "owner": "alice"}},
        {"op": "sync", "client": "alice"},
        *noise,
        {"op": "update", "client": "alice", "rowId": "r1", "data": {"owner": "bob"}},
        {"op": "sync", "client": "alice"},  # pulls one page, then pushes the handover
        *[{"op": "sync", "client": "alice"}] * 3,  # a client syncs on: a few more rounds
        {"op": "rows", "client": "alice"},
        {"op": "sync", "client": "bob"},
        {"op": "rows", "client": "bob"},
    ]

    result = script(url, steps, ws)

    alice, bob = (read["rows"] for read in result["rows"])
    assert [r["id"] for r in alice] == [f"n{i:05}" for i in range(others)]  # r1 went
    assert row("r1", "bob") in bob
    assert len(bob) == others + 1


def test_a_broadcast_after_a_handover_does_not_skip_its_eviction(
    served: tuple[str, Gateway],
) -> None:
    """Over WebSocket the client moves its cursor to each broadcast's ``serverHlc``: a broadcast
    of a later row it sees must not carry it past the eviction of the row it gave away."""
    url, _ = served
    steps = [
        {"op": "sync", "client": "alice"},
        {"op": "insert", "client": "alice", "rowId": "r1",
         "data": {"title": "t-r1", "owner": "alice"}},
        {"op": "sync", "client": "alice"},
        {"op": "update", "client": "alice", "rowId": "r1", "data": {"owner": "bob"}},
        {"op": "sync", "client": "alice"},  # pushes the handover
        {"op": "post", "path": f"/v1/sync/{GW}/push", "token": ADMIN,
         "body": push_body("root", [("n1", "alice")])},
        {"op": "until", "client": "alice", "rowId": "n1"},  # by broadcast
        *[{"op": "sync", "client": "alice"}] * 2,
        {"op": "rows", "client": "alice"},
    ]

    result = script(url, steps, ws=True)

    (alice,) = (read["rows"] for read in result["rows"])
    assert alice == [row("n1", "alice")]
