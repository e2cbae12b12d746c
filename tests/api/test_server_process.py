"""End to end on loopback: real HTTP and WebSocket, kill -9 durability, two processes on PG."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from lakesync.api.cli import _sigterm_latch
from lakesync.merge import merge_state
from lakesync.wsframes import decode_server_frame, encode_push
from tests.api.helpers import auth, delta, now_hlc, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json, verified

pytestmark = pytest.mark.slow


def pull_all(url: str, tok: str, client_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    since = "0"
    with httpx.Client(base_url=url, headers=auth(tok), timeout=30) as http:
        while True:
            body = http.get(
                "/v1/sync/gw1/pull",
                params={"since": since, "clientId": client_id, "limit": "10000"},
            ).json()
            out.extend(body["deltas"])
            since = body["serverHlc"]
            if not body["hasMore"]:
                return out


def test_loopback_http_websocket_and_graceful_stop(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        with (
            connect(f"{server.ws_url}/v1/sync/gw1/ws?token={token('bob')}") as bob,
            connect(
                f"{server.ws_url}/sync/gw1/ws", additional_headers=auth(token("carol"))
            ) as carol,
        ):
            time.sleep(0.2)  # let both register before the push
            d1 = delta("INSERT", "r1", "alice", title="hi")
            r = httpx.post(
                f"{server.url}/v1/sync/gw1/push",
                headers=auth(token("alice")),
                json={"clientId": "alice", "deltas": [as_json(d1)]},
            )
            assert r.status_code == 200, r.text
            for sock in (bob, carol):
                frame = decode_server_frame(sock.recv(timeout=10))  # type: ignore[arg-type]
                assert frame.broadcast and frame.deltas == [d1]
            d2 = delta("UPDATE", "r1", "bob", title="yo")
            bob.send(encode_push("bob", [d2]))
            assert not decode_server_frame(bob.recv(timeout=10)).broadcast  # type: ignore[arg-type]
            assert decode_server_frame(carol.recv(timeout=10)).deltas == [d2]  # type: ignore[arg-type]
        assert pull_all(server.url, token("alice"), "alice") == [as_json(d1), as_json(d2)]
    finally:
        assert server.stop() == 0
    assert "Application shutdown complete" in server.log_path.read_text()


def test_sigterm_runs_the_whole_shutdown(tmp_path: Path) -> None:
    """SIGTERM (systemd's, Kubernetes' and kill's stop) runs all of ``up``'s shutdown, not only
    uvicorn's: the lake jobs stop, the store closes (SQLite folds its WAL back and removes it),
    ``gateway.json`` goes, and the process exits 0 (uvicorn used to re-raise the signal after
    its own shutdown, killing the process before the rest ran)."""
    data = tmp_path / "data"
    # A long flush interval: the landing flusher thread is alive and waiting when the stop comes.
    server = ServerProcess(data, env={"LAKESYNC_FLUSH_INTERVAL": "3600"}).start()
    r = httpx.post(
        f"{server.url}/v1/sync/gw1/push",
        headers=auth(token("alice")),
        json={"clientId": "alice", "deltas": [as_json(delta("INSERT", "r1", "alice", v=1))]},
    )
    assert r.status_code == 200, r.text
    assert (data / "gateway.json").exists() and (data / "hotlog.sqlite3-wal").exists()
    assert server.stop() == 0
    left = sorted(p.name for p in data.iterdir())
    assert "gateway.json" not in left and "hotlog.sqlite3-wal" not in left, left
    log = server.log_path.read_text()
    assert "Application shutdown complete" in log
    assert "gateway stopped (lake jobs ended, store closed)" in log


def test_sigterm_while_starting_stops_cleanly_without_serving(tmp_path: Path) -> None:
    """A SIGTERM that comes while ``up`` is still starting (store, lake jobs, app; uvicorn's
    own handlers not yet installed) used to kill the process outright (-15): now the start
    completes, nothing is served, and the whole shutdown runs, exit 0."""
    data = tmp_path / "data"
    server = ServerProcess(data, env={"LAKESYNC_FLUSH_INTERVAL": "3600"})
    logged = server.spawn()
    assert server.proc is not None
    deadline = time.monotonic() + 120

    def output() -> str:
        with open(server.log_path, "rb") as log:
            log.seek(logged)
            return log.read().decode(errors="replace")

    # The lake jobs say they start (uvicorn starts ~0.3 s later): stop it right then.
    while "scheduled landing flush" not in output():
        assert server.proc.poll() is None and time.monotonic() < deadline, output()
        time.sleep(0.001)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(120) == 0, output()
    out = output()
    assert "gateway stopped (lake jobs ended, store closed)" in out, out
    assert not (data / "gateway.json").exists()


def test_a_second_sigterm_while_stopping_is_not_fatal() -> None:
    """Once serving has ended, ``up``'s handler takes a SIGTERM as the stop already under way
    (logged) instead of the default action, which killed the process mid-shutdown; the block
    gives the previous handler back."""
    before = signal.getsignal(signal.SIGTERM)
    with _sigterm_latch() as latch:
        latch.stopping = True
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to this, the main thread
        assert not latch.asked
        latch.stopping = False
        os.kill(os.getpid(), signal.SIGTERM)
        assert latch.asked  # before serving: remembered, the start goes on
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize("graceful", [False, True], ids=["kill-9", "sigterm"])
def test_stop_under_concurrent_pushes_loses_no_acknowledged_delta(
    tmp_path: Path, graceful: bool
) -> None:
    """kill -9 (or a graceful SIGTERM) mid-load: every acknowledged delta survives exactly once,
    no batch is half-stored, and a draining gateway answers 200 or 503, never another 5xx."""
    server = ServerProcess(tmp_path / "data").start()
    statuses: Counter[int] = Counter()
    acked: list[str] = []
    attempted: list[list[str]] = []
    lock = threading.Lock()
    stop = threading.Event()
    loaded = threading.Event()  # 600 deltas acknowledged: the stop comes mid-load

    def worker(n: int) -> None:
        client = f"c{n}"
        tok = token(client)
        with httpx.Client(base_url=server.url, headers=auth(tok), timeout=10) as http:
            i = 0
            while not stop.is_set():
                batch = [delta("INSERT", f"{client}-{i}-{j}", client, v=j) for j in range(20)]
                ids = [d.delta_id for d in batch]
                with lock:
                    attempted.append(ids)
                try:
                    r = http.post(
                        "/v1/sync/gw1/push",
                        json={"clientId": client, "deltas": [as_json(d) for d in batch]},
                    )
                except httpx.HTTPError:
                    return
                with lock:
                    statuses[r.status_code] += 1
                if r.status_code == 200:
                    with lock:
                        acked.extend(ids)
                        if len(acked) >= 600:
                            loaded.set()
                i += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    # However long the machine takes; if every worker is gone first, the assertion below says so.
    while not loaded.wait(0.1) and any(t.is_alive() for t in threads):
        pass
    if graceful:
        server.stop()
    else:
        server.kill()
    stop.set()
    for t in threads:
        t.join(15)
    assert len(acked) >= 600, f"the gateway stopped answering first: {statuses}"
    assert set(statuses) <= {200, 503}, statuses
    restarted = ServerProcess(tmp_path / "data").start()
    try:
        stored = Counter(d["deltaId"] for d in pull_all(restarted.url, token("z"), "z"))
    finally:
        restarted.stop()
    assert all(stored[i] == 1 for i in acked), "an acknowledged delta is missing or duplicated"
    assert max(stored.values()) == 1
    for ids in attempted:  # a batch is stored whole or not at all
        assert {stored[i] for i in ids} in ({0}, {1})


@pytest.mark.postgres
def test_two_processes_share_one_postgres_store(tmp_path: Path) -> None:
    require_postgres()
    schema = fresh_pg_schema()
    env = {"LAKESYNC_STORE_URL": PG_DSN, "LAKESYNC_PG_SCHEMA": schema}
    one = ServerProcess(tmp_path / "one", env).start()
    two = ServerProcess(tmp_path / "two", env).start()
    try:
        with connect(f"{two.ws_url}/v1/sync/gw1/ws?token={token('bob')}") as bob_ws:
            time.sleep(0.2)
            mine = [delta("INSERT", f"a{i}", "alice", n=i, hlc=now_hlc()) for i in range(5)]
            theirs = [delta("UPDATE", "a0", "bob", n=100), delta("INSERT", "b1", "bob", n=1)]
            r1 = httpx.post(
                f"{one.url}/v1/sync/gw1/push",
                headers=auth(token("alice")),
                json={"clientId": "alice", "deltas": [as_json(d) for d in mine]},
            )
            assert r1.status_code == 200, r1.text
            frame = decode_server_frame(bob_ws.recv(timeout=10))  # type: ignore[arg-type]
            assert frame.broadcast and frame.deltas == mine
            r2 = httpx.post(
                f"{two.url}/v1/sync/gw1/push",
                headers=auth(token("bob")),
                json={"clientId": "bob", "deltas": [as_json(d) for d in theirs]},
            )
            assert r2.status_code == 200, r2.text
        via_one = pull_all(one.url, token("alice"), "alice")
        via_two = pull_all(two.url, token("bob"), "bob")
        assert via_one == via_two
        state = merge_state(verified(d) for d in via_one)
        assert state == merge_state([*mine, *theirs])
        assert state[("todos", "a0")] == {"n": 100}
    finally:
        one.stop()
        two.stop()
        drop_pg_schema(schema)
