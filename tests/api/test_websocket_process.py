"""WebSocket broadcasts between real gateway processes on one PostgreSQL store: a broadcast
crosses processes filtered by each receiver's sync rules, and keeps crossing after the
receiving process's LISTEN session is killed."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from websockets.sync.client import ClientConnection, connect

from lakesync.delta import RowDelta
from lakesync.wire import FEATURES_HEADER, VIEW_EVICTIONS_FEATURE
from lakesync.wsframes import decode_server_frame, encode_pull
from tests.api.helpers import MEMBERS_RULES, Replica, auth, delta, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

OWNER_RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            "handover": True,  # bob gives his row to alice
        }
    ],
}


def push(server: ServerProcess, gw: str, sub: str, deltas: list[RowDelta]) -> None:
    r = httpx.post(
        f"{server.url}/v1/sync/{gw}/push",
        headers=auth(token(sub, gw)),
        json={"clientId": sub, "deltas": [as_json(d) for d in deltas]},
    )
    assert r.status_code == 200, r.text


def subscribe(server: ServerProcess, gw: str, sub: str) -> ClientConnection:
    return connect(f"{server.ws_url}/v1/sync/{gw}/ws?token={token(sub, gw)}")


def next_broadcast(ws: ClientConnection) -> list[RowDelta]:
    """The deltas of the next broadcast this socket receives."""
    frame = decode_server_frame(ws.recv(timeout=60))  # type: ignore[arg-type]
    assert frame.broadcast
    return frame.deltas


def hear(ws: ClientConnection, replica: Replica) -> tuple[set[str], dict[str, dict[str, Any]]]:
    """Apply the next broadcast to ``replica``: the rows it speaks of, and the rows held after."""
    deltas = next_broadcast(ws)
    for d in deltas:
        replica.state.apply(d)
    return {d.row_id for d in deltas}, {row: cols for (_, row), cols in replica.rows().items()}


def _dsn_named(name: str) -> str:
    """The test DSN with an application_name, so this process's sessions can be found."""
    return f"{PG_DSN}{'&' if '?' in PG_DSN else '?'}application_name={name}"


def _listener_pids(name: str) -> list[int]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND query LIKE 'LISTEN %%'",
            (name,),
        ).fetchall()
    return [int(r[0]) for r in rows]


@pytest.fixture
def two_processes(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two gateway processes on one PostgreSQL schema; each one's sessions are named after
    its ``data_dir.name`` (``<schema>-one``, ``<schema>-two``)."""
    require_postgres()
    schema = fresh_pg_schema()
    servers = []
    try:
        for name in ("one", "two"):
            env = {
                "LAKESYNC_STORE_URL": _dsn_named(f"{schema}-{name}"),
                "LAKESYNC_PG_SCHEMA": schema,
            }
            servers.append(ServerProcess(tmp_path / schema / f"{schema}-{name}", env).start())
        yield servers[0], servers[1]
    finally:
        for s in servers:
            s.stop()
        drop_pg_schema(schema)


def test_a_broadcast_crosses_processes_filtered_by_the_receivers_rules(
    two_processes: tuple[ServerProcess, ServerProcess],
) -> None:
    one, two = two_processes
    r = httpx.post(
        f"{one.url}/v1/admin/sync-rules/relay",
        json=OWNER_RULES,
        headers=auth(token("ops", "relay", "admin")),
    )
    assert r.status_code == 200, r.text
    mine, theirs = Replica(), Replica()
    with subscribe(two, "relay", "alice") as alice, subscribe(two, "relay", "bob") as bob:
        push(one, "relay", "alice", [delta("INSERT", "a1", "alice", owner="alice", t="x")])
        push(one, "relay", "bob", [delta("INSERT", "b1", "bob", owner="bob", t="y")])
        push(one, "relay", "alice", [delta("INSERT", "a2", "alice", owner="alice", t="z")])
        # Each receiver on the other process hears of its own rows only, in order.
        a1 = {"owner": "alice", "t": "x"}
        assert hear(alice, mine) == ({"a1"}, {"a1": a1})
        assert hear(alice, mine) == ({"a2"}, {"a1": a1, "a2": {"owner": "alice", "t": "z"}})
        assert hear(bob, theirs) == ({"b1"}, {"b1": {"owner": "bob", "t": "y"}})
        # Bob gives his row to alice: it leaves his replica and arrives whole in hers.
        push(one, "relay", "bob", [delta("UPDATE", "b1", "bob", owner="alice")])
        seen, rows = hear(alice, mine)
        assert seen == {"b1"} and rows["b1"] == {"owner": "alice", "t": "y"}
        assert hear(bob, theirs) == ({"b1"}, {})


def test_listen_reconnects_after_its_session_is_killed(
    two_processes: tuple[ServerProcess, ServerProcess],
) -> None:
    """The receiving process's LISTEN session is terminated by the server; the process opens a
    new one and broadcasts from the other process reach its subscribers again."""
    one, two = two_processes
    name = two.data_dir.name
    with subscribe(two, "gw1", "bob") as bob:
        push(one, "gw1", "alice", [delta("INSERT", "before", "alice", n=1)])
        assert [d.row_id for d in next_broadcast(bob)] == ["before"]
        [killed] = _listener_pids(name)
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (killed,))
        # The listener retries every second on its own; wait for its new session.
        deadline = time.monotonic() + 60
        while _listener_pids(name) in ([], [killed]):
            assert time.monotonic() < deadline, "the listener did not open a new session"
            time.sleep(0.1)
        push(one, "gw1", "alice", [delta("INSERT", "after", "alice", n=2)])
        assert [d.row_id for d in next_broadcast(bob)] == ["after"]


def test_a_membership_change_on_one_process_moves_a_view_on_another(
    two_processes: tuple[ServerProcess, ServerProcess],
) -> None:
    """Relational rules across processes: a membership pushed through one process moves the
    rows of the lists it names into (and out of) a socket's view on the other, live."""
    one, two = two_processes
    admin = auth(token("ops", "relay", "admin"))
    r = httpx.post(f"{one.url}/v1/admin/sync-rules/relay", json=MEMBERS_RULES, headers=admin)
    assert r.status_code == 200, r.text

    def push_as_admin(deltas: list[RowDelta]) -> None:
        r = httpx.post(f"{one.url}/v1/sync/relay/push", headers=admin,
                       json={"clientId": "ops", "deltas": [as_json(d) for d in deltas]})
        assert r.status_code == 200, r.text

    push_as_admin([delta("INSERT", "m1", "ops", table="list_members",
                         user_id="alice", list_id="l1"),
                   delta("INSERT", "t1", "ops", table="todos", list_id="l1"),
                   delta("INSERT", "t2", "ops", table="todos", list_id="l2")])
    live = Replica()
    features = {FEATURES_HEADER: VIEW_EVICTIONS_FEATURE}
    url = f"{two.ws_url}/v1/sync/relay/ws?token={token('alice', 'relay')}"
    with connect(url, additional_headers=features) as ws:
        ws.send(encode_pull("alice", 0, 100))
        for d in decode_server_frame(ws.recv(timeout=60)).deltas:  # type: ignore[arg-type]
            live.state.apply(d)

        def todos() -> set[str]:
            return {row for (table, row) in live.rows() if table == "todos"}

        def hear_until(done: Callable[[], bool]) -> None:
            while not done():
                for d in next_broadcast(ws):
                    live.state.apply(d)

        assert todos() == {"t1"}
        push_as_admin([delta("INSERT", "m2", "ops", table="list_members",
                             user_id="alice", list_id="l2")])
        hear_until(lambda: todos() == {"t1", "t2"})  # she joined l2 on the other process
        push_as_admin([delta("DELETE", "m1", "ops", table="list_members")])
        hear_until(lambda: todos() == {"t2"})  # and left l1
