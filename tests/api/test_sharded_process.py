"""A sharded deployment served by real gateway processes: ``lakesync up`` with ``shards:`` on two
PostgreSQL databases (tables ``events`` in the shard, every other table in the default store).

Concurrent pushers on both stores through two processes and concurrent pullers paging in small
pages see every acknowledged delta exactly once, each client's in push order, never a skip (the
stores' floors: without them a puller's cursor passes an entry another store commits later,
which commits slowed down on purpose make frequent);
each store holds only its tables' deltas; a WebSocket client hears of both stores' pushes, in
order; a shard refusing connections fails the pushes and pulls that need it (503), not the
others, and a retry after it is back lands once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from websockets.sync.client import connect

from lakesync.delta import RowDelta
from lakesync.wire import FEATURES_HEADER, VIEW_EVICTIONS_FEATURE
from lakesync.wsframes import decode_server_frame
from tests.api.helpers import auth, delta, token
from tests.conftest import allow_connections, drop_pg_database, fresh_pg_database
from tests.gateway_process import ServerProcess
from tests.hotlog.common import slow_commits
from tests.netns import wait_for
from tests.wire_json import as_json

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

GW = "gw1"


@dataclass
class Deployment:
    servers: list[ServerProcess]
    default_url: str
    shard_url: str


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """Two gateway processes serving one sharded deployment on two fresh databases."""
    urls = [fresh_pg_database(), fresh_pg_database()]
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        f"store_url: {urls[0]}\n"
        "shards:\n"
        f"  - name: events\n    store_url: {urls[1]}\n    tables: [events]\n"
    )
    env = {"LAKESYNC_FLUSH_INTERVAL": "0"}
    servers: list[ServerProcess] = []
    try:
        for name in ("one", "two"):
            servers.append(ServerProcess(tmp_path / name, env, config).start())
        yield Deployment(servers, urls[0], urls[1])
    finally:
        for s in servers:
            s.stop()
        for url in urls:
            allow_connections(url, True)
            drop_pg_database(url)


def _push(server: ServerProcess, sub: str, deltas: list[RowDelta]) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/sync/{GW}/push",
        headers=auth(token(sub, GW)),
        json={"clientId": sub, "deltas": [as_json(d) for d in deltas]},
        timeout=120,
    )


def _pull(server: ServerProcess, sub: str, since: str, limit: int) -> httpx.Response:
    return httpx.get(
        f"{server.url}/v1/sync/{GW}/pull",
        params={"clientId": sub, "since": since, "limit": limit},
        headers=auth(token(sub, GW)),
        timeout=120,
    )


def _pull_all(server: ServerProcess, sub: str, limit: int = 1000) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    since = "0"
    while True:
        r = _pull(server, sub, since, limit)
        assert r.status_code == 200, r.text
        body = r.json()
        seen += body["deltas"]
        since = str(body["serverHlc"])
        if not body["hasMore"]:
            return seen


def _tables_held(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {str(t) for (t,) in conn.execute("select distinct tbl from lakesync.log")}



def test_concurrent_pushes_on_two_stores_reach_every_puller_once_in_order(
    deployment: Deployment,
) -> None:
    servers = deployment.servers
    slow_commits(deployment.default_url, 0.1)
    slow_commits(deployment.shard_url, 0.1)
    acked: dict[str, list[str]] = {}  # pusher -> its acknowledged deltaIds, in push order
    failures: list[str] = []
    done = threading.Event()

    def pusher(n: int) -> None:
        sub = f"p{n}"
        server = servers[n % 2]
        mine: list[str] = []
        for i in range(25):
            # Pushers 0/1 write the default store, 2/3 the shard, 4/5 both in one push.
            tables = [["todos"], ["events"], ["todos", "events"]][n // 2]
            batch = [delta("INSERT", f"{sub}-{i}-{t}", sub, table=t, n=i) for t in tables]
            r = _push(server, sub, batch)
            if r.status_code != 200:
                failures.append(r.text)
                return
            mine += [d.delta_id for d in batch]
        acked[sub] = mine

    def puller(n: int, results: dict[str, list[str]]) -> None:
        sub = f"r{n}"
        server = servers[n % 2]
        since, seen = "0", []
        while True:
            finished = done.is_set()  # every push acknowledged before this pull began
            r = _pull(server, sub, since, 3)
            if r.status_code != 200:
                failures.append(r.text)
                return
            body = r.json()
            seen += [d["deltaId"] for d in body["deltas"]]
            since = str(body["serverHlc"])
            if finished and not body["hasMore"]:
                results[sub] = seen
                return

    results: dict[str, list[str]] = {}
    pushers = [threading.Thread(target=pusher, args=(n,)) for n in range(6)]
    pullers = [threading.Thread(target=puller, args=(n, results)) for n in range(4)]
    for t in [*pushers, *pullers]:
        t.start()
    for t in pushers:
        t.join()
    done.set()
    for t in pullers:
        t.join()
    assert failures == []
    everything = {d for ids in acked.values() for d in ids}
    assert len(everything) == 6 * 25 + 2 * 25
    assert sorted(results) == ["r0", "r1", "r2", "r3"]
    for sub, seen in results.items():
        assert len(seen) == len(set(seen)), f"{sub} saw a delta twice"
        assert set(seen) == everything, f"{sub} missed {len(everything - set(seen))} deltas"
        at = {d: i for i, d in enumerate(seen)}
        for ids in acked.values():
            assert [at[d] for d in ids] == sorted(at[d] for d in ids), f"{sub}: out of order"
    # Each store holds its own tables' deltas only.
    assert _tables_held(deployment.default_url) == {"todos"}
    assert _tables_held(deployment.shard_url) == {"events"}


def test_a_websocket_client_hears_of_both_stores_in_order(deployment: Deployment) -> None:
    one, two = deployment.servers
    url = f"{two.ws_url}/v1/sync/{GW}/ws?token={token('listener', GW)}"
    # A client that reads broadcast cursors (a v1 client's broadcasts carry none).
    with connect(url, additional_headers={FEATURES_HEADER: VIEW_EVICTIONS_FEATURE}) as ws:
        pushes = [
            (one, [delta("INSERT", "t1", "a", table="todos", n=1)]),
            (two, [delta("INSERT", "e1", "b", table="events", n=2)]),
            (one, [delta("INSERT", "e2", "a", table="events", n=3),
                   delta("INSERT", "t2", "a", table="todos", n=4)]),
            (two, [delta("INSERT", "t3", "b", table="todos", n=5)]),
        ]
        for server, batch in pushes:
            r = _push(server, batch[0].client_id, batch)
            assert r.status_code == 200, r.text
        heard: list[str] = []
        last = 0
        while len(heard) < 5:
            frame = decode_server_frame(ws.recv(timeout=30))  # type: ignore[arg-type]
            assert frame.broadcast
            assert frame.server_hlc > last  # never an entry twice, never backwards
            last = frame.server_hlc
            heard += [d.row_id for d in frame.deltas]
    assert sorted(heard) == ["e1", "e2", "t1", "t2", "t3"]
    # In push order across the stores (each push acknowledged before the next was sent).
    assert heard.index("t1") < heard.index("e1") < min(heard.index("e2"), heard.index("t2"))
    assert heard.index("t3") == 4
    # While nobody listens nothing is kept back for later: a socket that connects afterwards
    # hears the pushes made after it, not the ones it pulls.
    wait_for("the socket's close at the gateway", lambda: _sockets(two) == 0)
    assert _push(two, "b", [delta("INSERT", "e3", "b", table="events", n=6)]).status_code == 200
    with connect(url, additional_headers={FEATURES_HEADER: VIEW_EVICTIONS_FEATURE}) as ws:
        wait_for("the new socket at the gateway", lambda: _sockets(two) == 1)
        assert _push(two, "b", [delta("INSERT", "t4", "b", table="todos", n=7)]).status_code == 200
        frame = decode_server_frame(ws.recv(timeout=30))  # type: ignore[arg-type]
        assert [d.row_id for d in frame.deltas] == ["t4"]


def _sockets(server: ServerProcess) -> int:
    """The gateway process's open WebSocket connections, from its metrics."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    line = next(x for x in text.splitlines() if x.startswith("lakesync_ws_connections "))
    return int(float(line.split()[1]))


def test_a_shard_refusing_connections_fails_only_what_needs_it(deployment: Deployment) -> None:
    one, two = deployment.servers
    assert _push(one, "a", [delta("INSERT", "t0", "a", table="todos", n=0),
                            delta("INSERT", "e0", "a", table="events", n=0)]).status_code == 200
    allow_connections(deployment.shard_url, False)
    late = [delta("INSERT", "t1", "a", table="todos", n=1),
            delta("INSERT", "e1", "a", table="events", n=1)]
    refused = _push(one, "a", late)
    assert refused.status_code == 503, refused.text
    assert _pull(two, "r", "0", 10).status_code == 503
    # A push that touches the default store only is acknowledged.
    ok = _push(two, "b", [delta("INSERT", "t2", "b", table="todos", n=2)])
    assert ok.status_code == 200, ok.text
    allow_connections(deployment.shard_url, True)
    retries: list[httpx.Response] = []

    def retried() -> bool:
        retries.append(_push(one, "a", late))
        return retries[-1].status_code == 200

    wait_for("the shard to take connections again", retried)
    assert all(r.status_code == 503 for r in retries[:-1]), [r.text for r in retries]
    for server in (one, two):
        rows = [d["rowId"] for d in _pull_all(server, "r", 2)]
        assert sorted(rows) == ["e0", "e1", "t0", "t1", "t2"]
