"""End-to-end: clients against a real gateway subprocess, over HTTP and WebSocket.

The transport behaviour suite runs once per transport; the acceptance tests (convergence,
offline column edits, crashes, realtime, reconnect) follow. They need ``lakesync/api/__main__.py``;
when the gateway is missing they are skipped with a message saying so.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.client import Backoff, Event, LakeSyncClient, SyncReport
from lakesync.client._auth import TokenProvider
from lakesync.client.errors import ChangesRejectedError, ForbiddenError, SchemaError
from lakesync.client.transport import HttpTransport, Transport, WebSocketTransport
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.merge import merge_state
from tests.gateway_process import ServerProcess
from tests.quickstart import documented_quickstart

pytestmark = pytest.mark.slow

TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "prio", "type": "number"},
        {"name": "tags", "type": "json"},
    ],
}
TransportName = Literal["http", "websocket"]
TRANSPORTS: list[TransportName] = ["http", "websocket"]


def make(
    gw: ServerProcess, gw_id: str, sub: str, path: str | Path = ":memory:", **kw: Any
) -> LakeSyncClient:
    kw.setdefault("schemas", [TODOS])
    return LakeSyncClient(str(path), url=gw.url, gateway_id=gw_id, token=gw.token(sub, gw_id), **kw)


def replica(c: LakeSyncClient, table: str = "todos") -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for r in c.query(f"select * from {table}"):
        rid = r.pop("row_id")
        out[(table, rid)] = {k: v for k, v in r.items() if v is not None}
    return out


def all_deltas(gw: ServerProcess, gw_id: str) -> list[RowDelta]:
    """Every delta the gateway holds, read with a fresh pull from the start."""
    tr = HttpTransport(gw.url, gw_id, TokenProvider(gw.token("observer", gw_id)))
    out: list[RowDelta] = []
    since = 0
    try:
        while True:
            page = tr.pull("observer", since, 10_000)
            out.extend(page.deltas)
            since = page.server_hlc
            if not page.has_more:
                return out
    finally:
        tr.close()


def gateway_state(gw: ServerProcess, gw_id: str, table: str = "todos") -> dict[Any, dict[str, Any]]:
    return {
        k: {c: v for c, v in row.items() if v is not None}
        for k, row in merge_state(all_deltas(gw, gw_id)).items()
        if k[0] == table
    }


def wait_for(cond: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


# -- transport behaviour suite (one body, both transports) ---------------------------------


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> TransportName:
    name: TransportName = request.param
    return name


@pytest.fixture
def raw_transport(
    gateway: ServerProcess, gw_id: str, transport: TransportName
) -> Iterator[Transport]:
    tokens = TokenProvider(gateway.token("raw", gw_id))
    tr: Transport = (
        HttpTransport(gateway.url, gw_id, tokens)
        if transport == "http"
        else WebSocketTransport(gateway.url, gw_id, tokens)
    )
    yield tr
    tr.close()


def test_transport_push_pull_dedup_and_paging(raw_transport: Transport) -> None:
    clock = HLC()
    deltas = [
        RowDelta.create(
            "INSERT", "todos", f"r{i}", "raw", {"title": f"t{i}", "prio": i}, clock.now()
        )
        for i in range(7)
    ]
    first = raw_transport.push("raw", deltas[:4], 0)
    again = raw_transport.push("raw", deltas, 0)  # the first four are known: stored once
    assert again.server_hlc >= first.server_hlc
    got: list[RowDelta] = []
    since, pages = 0, 0
    while True:
        page = raw_transport.pull("raw", since, 3)
        got.extend(page.deltas)
        pages += 1
        assert page.server_hlc >= since
        since = page.server_hlc
        if not page.has_more:
            break
    assert sorted(d.delta_id for d in got) == sorted(d.delta_id for d in deltas)
    assert pages >= 3
    assert raw_transport.checkpoint() is None  # the gateway answers 404 for now
    assert raw_transport.pull("raw", since, 3).deltas == []


def test_transport_reports_typed_errors(raw_transport: Transport) -> None:
    bad = RowDelta.create("INSERT", "todos", "r", "someone-else", {"title": "x"}, HLC().now())
    with pytest.raises(ForbiddenError):
        raw_transport.push("raw", [bad], 0)


def test_clients_round_trip_values(
    gateway: ServerProcess, gw_id: str, transport: TransportName
) -> None:
    with (
        make(gateway, gw_id, "a", transport=transport) as a,
        make(gateway, gw_id, "b", transport=transport, pull_limit=2) as b,
    ):
        a.insert("todos", "r1", {"title": "ünï ✓", "done": True, "prio": 2.5, "tags": {"x": [1]}})
        a.insert("todos", "r2", {"title": "two", "done": False, "prio": 10**15})
        a.insert("todos", "r3", {"title": "three"})
        a.delete("todos", "r3")
        a.sync()
        b.sync()
        assert replica(b) == replica(a) == gateway_state(gateway, gw_id)
        assert b.query("select done from todos where row_id = 'r1'") == [{"done": True}]
        assert b.status.queue_depth == 0 and a.queue_depth == 0


def test_token_callable_is_called_again_on_401(
    gateway: ServerProcess, gw_id: str, transport: TransportName
) -> None:
    issued: list[str] = []

    def token() -> str:
        # The first token is already expired; the gateway's 401 makes the client ask again.
        ttl = -60 if not issued else 3600
        issued.append(gateway.token("t", gw_id, ttl_s=ttl))
        return issued[-1]

    with LakeSyncClient(
        ":memory:",
        url=gateway.url,
        gateway_id=gw_id,
        token=token,
        schemas=[TODOS],
        transport=transport,
    ) as c:
        c.insert("todos", "r", {"title": "x"})
        c.sync()
        assert len(issued) == 2 and c.queue_depth == 0


def test_wrong_gateway_token_is_forbidden(
    gateway: ServerProcess, gw_id: str, transport: TransportName
) -> None:
    with (
        LakeSyncClient(
            ":memory:",
            url=gateway.url,
            gateway_id=gw_id,
            token=gateway.token("a", "another_gateway"),
            transport=transport,
        ) as c,
        pytest.raises(ForbiddenError),
    ):
        c.sync()


def test_refused_delta_is_dead_lettered(
    gateway: ServerProcess, gw_id: str, transport: TransportName
) -> None:
    import httpx

    # Register the table on the gateway without the column this client also writes.
    admin = gateway.token("admin", gw_id, role="admin")
    server_schema = {**TODOS, "columns": TODOS["columns"][:2]}
    resp = httpx.post(
        f"{gateway.url}/v1/admin/schema/{gw_id}",
        json=server_schema,
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert resp.status_code == 200, resp.text
    with make(gateway, gw_id, "a", transport=transport) as a:
        events: list[Event] = []
        a.on("dead_letter", events.append)
        a.insert("todos", "ok1", {"title": "fine"})
        a.insert("todos", "bad", {"title": "x", "prio": 1})
        a.insert("todos", "ok2", {"done": True})
        report = a.sync()
        assert (report.pushed, report.dead_lettered) == (2, 1)
        assert [e.detail["row_id"] for e in events] == ["bad"]
        assert a.dead_letters()[0].code == SchemaError.code
        assert set(gateway_state(gateway, gw_id)) == {("todos", "ok1"), ("todos", "ok2")}


@pytest.mark.parametrize("flavour", ["blocking", "async"])
def test_refused_changes_are_reported_warned_and_raise_on_request(
    gateway: ServerProcess, gw_id: str, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    import httpx

    from lakesync.client import AsyncLakeSyncClient

    # Register the table on the gateway without the column this client also writes.
    admin = gateway.token("admin", gw_id, role="admin")
    table = {"table": "refusals", "columns": TODOS["columns"][:2]}
    resp = httpx.post(
        f"{gateway.url}/v1/admin/schema/{gw_id}",
        json=table,
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert resp.status_code == 200, resp.text
    mine = {**table, "columns": TODOS["columns"][:3]}
    kw: dict[str, Any] = {"url": gateway.url, "gateway_id": gw_id, "schemas": [mine]}

    async def run() -> tuple[SyncReport, ChangesRejectedError]:
        token = gateway.token(f"refused-{flavour}", gw_id)
        if flavour == "blocking":
            with LakeSyncClient(":memory:", token=token, **kw) as c:
                c.insert("refusals", "ok", {"title": "fine"})
                c.insert("refusals", "bad1", {"title": "x", "prio": 1})
                report = c.sync()
                c.insert("refusals", "bad2", {"title": "y", "prio": 2})
                with pytest.raises(ChangesRejectedError) as raised:
                    c.sync(raise_on_rejected=True)
                return report, raised.value
        async with AsyncLakeSyncClient(":memory:", token=token, **kw) as a:
            await a.insert("refusals", "ok", {"title": "fine"})
            await a.insert("refusals", "bad1", {"title": "x", "prio": 1})
            report = await a.sync()
            await a.insert("refusals", "bad2", {"title": "y", "prio": 2})
            with pytest.raises(ChangesRejectedError) as raised:
                await a.sync(raise_on_rejected=True)
            return report, raised.value

    with caplog.at_level(logging.WARNING, logger="lakesync.client"):
        report, error = asyncio.run(run())
    assert (report.pushed, report.dead_lettered) == (1, 1)
    assert [(r.delta.row_id, r.code) for r in report.rejected] == [("bad1", SchemaError.code)]
    assert [(r.delta.row_id, r.code) for r in error.report.rejected] == [
        ("bad2", SchemaError.code)
    ]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert all(r.name.startswith("lakesync.client") for r in warnings)
    assert "refused 1 local change" in warnings[0].getMessage()
    assert "refusals/bad1" in warnings[0].getMessage()
    assert "refusals/bad2" in str(error)


def test_auto_sync_warns_of_refused_changes(
    gateway: ServerProcess, gw_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    import httpx

    admin = gateway.token("admin", gw_id, role="admin")
    table = {"table": "refused_auto", "columns": TODOS["columns"][:1]}
    resp = httpx.post(f"{gateway.url}/v1/admin/schema/{gw_id}", json=table,
                      headers={"Authorization": f"Bearer {admin}"})
    assert resp.status_code == 200, resp.text
    mine = {**table, "columns": TODOS["columns"][:2]}
    with (
        caplog.at_level(logging.WARNING, logger="lakesync.client"),
        make(gateway, gw_id, "auto", schemas=[mine]) as c,
    ):
        c.start_auto_sync(interval=0.2)
        c.insert("refused_auto", "bad", {"title": "x", "done": True})
        wait_for(lambda: any("refused_auto/bad" in r.getMessage() for r in caplog.records), 60)
        c.stop_auto_sync()
        assert [d.delta.row_id for d in c.dead_letters()] == ["bad"]


# -- acceptance ------------------------------------------------------------------------------


def test_offline_edits_to_different_columns_both_survive(
    gateway: ServerProcess, gw_id: str
) -> None:
    with make(gateway, gw_id, "a") as a, make(gateway, gw_id, "b") as b:
        a.insert("todos", "r", {"title": "start", "done": False, "prio": 1})
        a.sync()
        b.sync()
        # Both offline: a edits the title, b the flag; then the same column (prio) by both.
        a.update("todos", "r", {"title": "from a", "prio": 5})
        b.update("todos", "r", {"done": True, "prio": 7})
        b.sync()
        a.sync()
        b.sync()
        later = max(
            (d.hlc, d.client_id, d.values().get("prio"))
            for d in all_deltas(gateway, gw_id)
            if "prio" in d.values()
        )
        expected = {("todos", "r"): {"title": "from a", "done": True, "prio": later[2]}}
        assert replica(a) == replica(b) == gateway_state(gateway, gw_id) == expected


CRASH_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from lakesync.client import LakeSyncClient
    path, url, gw, token = sys.argv[1:5]
    todos = {"table": "todos", "columns": [{"name": "title", "type": "string"}]}
    c = LakeSyncClient(path, url=url, gateway_id=gw, token=token, schemas=[todos])
    c.insert("todos", "crash-row", {"title": "written, never pushed"})
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_kill_9_before_push_then_pushed_exactly_once(
    gateway: ServerProcess, gw_id: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "crash.db")
    token = gateway.token("crashy", gw_id)
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, path, gateway.url, gw_id, token],
        check=False,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL
    assert all_deltas(gateway, gw_id) == []
    with make(gateway, gw_id, "crashy", path, schemas=[]) as c:
        assert c.queue_depth == 1
        c.sync()
        c.sync()
        assert c.queue_depth == 0
    deltas = all_deltas(gateway, gw_id)
    assert [(d.row_id, d.values()) for d in deltas] == [
        ("crash-row", {"title": "written, never pushed"})
    ]


PULL_CRASH_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from lakesync.client import LakeSyncClient
    from lakesync.client._rows import ReplicaRows
    path, url, gw, token = sys.argv[1:5]
    saved = 0
    real = ReplicaRows._show
    def save_then_die(self, *args):
        global saved
        real(self, *args)
        saved += 1
        if saved == 3:  # the third page is written, its transaction not yet committed
            os.kill(os.getpid(), signal.SIGKILL)
    ReplicaRows._show = save_then_die
    c = LakeSyncClient(path, url=url, gateway_id=gw, token=token, pull_limit=10)
    c.sync()
    """
)


def test_kill_9_during_pull_apply_then_resume(
    gateway: ServerProcess, gw_id: str, tmp_path: Path
) -> None:
    with make(gateway, gw_id, "writer") as w:
        for i in range(40):
            w.insert("todos", f"r{i:02d}", {"title": str(i)})
        w.sync()
    path = tmp_path / "pull-crash.db"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PULL_CRASH_CHILD,
            str(path),
            gateway.url,
            gw_id,
            gateway.token("p", gw_id),
        ],
        check=False,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL
    with make(gateway, gw_id, "p", path, schemas=[]) as c:
        # Two whole pages (20 rows) committed with their cursor; the third died mid-apply.
        rows = replica(c)
        assert len(rows) == 20
        cursor = c.status.cursor
        assert cursor > 0
        c.sync()
        assert replica(c) == gateway_state(gateway, gw_id)
        assert len(replica(c)) == 40


def test_websocket_push_reaches_other_client_and_watch_without_polling(
    gateway: ServerProcess, gw_id: str
) -> None:
    with (
        make(gateway, gw_id, "a", transport="websocket") as a,
        make(gateway, gw_id, "b", transport="websocket") as b,
    ):
        b.sync()  # opens the socket; from now on b never polls
        cursor = b.status.cursor
        seen: list[str] = []
        arrived = threading.Event()

        def on_change(changes: list[Any]) -> None:
            seen.extend(f"{c.origin}:{c.row_id}" for c in changes)
            arrived.set()

        b.watch("todos", on_change)
        a.insert("todos", "live", {"title": "hello"})
        a.sync()
        assert arrived.wait(10)
        assert seen == ["realtime:live"]
        assert b.query("select title from todos") == [{"title": "hello"}]
        assert b.status.cursor == cursor  # broadcasts do not move the cursor


def test_websocket_drop_and_recover_without_loss_or_duplicates(own_gateway: ServerProcess) -> None:
    gw, gw_id = own_gateway, "gwreconnect"
    quick = Backoff(base=0.05, cap=1.0)  # reconnect attempts at most 1 s apart
    with (
        make(gw, gw_id, "a") as a,
        make(gw, gw_id, "b", transport="websocket", backoff=quick) as b,
    ):
        b.sync()
        a.insert("todos", "before", {"title": "1"})
        a.sync()
        wait_for(lambda: ("todos", "before") in replica(b))
        gw.restart()  # drops b's socket; b reconnects with backoff on its own
        b.insert("todos", "offline-edit", {"title": "made while disconnected"})
        a.insert("todos", "during", {"title": "2"})
        a.sync()
        # b catches up after reconnecting (pull from its cursor), with no sync() call.
        wait_for(lambda: ("todos", "during") in replica(b), timeout=60)
        b.sync()
        a.sync()
        assert replica(a) == replica(b) == gateway_state(gw, gw_id)
        ids = [d.delta_id for d in all_deltas(gw, gw_id)]
        assert len(ids) == len(set(ids)) == 3


def test_a_slow_websocket_receiver_is_dropped_and_resumes_from_its_cursor(
    tmp_path: Path,
) -> None:
    """A client that stops reading its socket (its loop is stuck in a watch callback) while
    another pushes is dropped by the gateway (its send queue is bounded: 4408, docs/protocol.md
    §9); once it reads again it applies what had reached it, reconnects on its own and pulls
    the rest from its cursor: it converges with no sync() call."""
    env = {"LAKESYNC_WS_RATE_LIMIT": "0", "LAKESYNC_WS_SEND_QUEUE_BYTES": str(64 * 1024)}
    gw, gw_id = ServerProcess(tmp_path / "gw-data", env).start(), "gwslow"
    admin = {"Authorization": f"Bearer {gw.token('root', gw_id, role='admin')}"}

    def sockets() -> int:
        r = httpx.get(f"{gw.url}/v1/admin/metrics/{gw_id}", headers=admin)
        return int(r.json()["wsConnections"])

    stuck, release = threading.Event(), threading.Event()

    def stall(changes: list[Any]) -> None:
        if not release.is_set():
            stuck.set()
            release.wait(120)  # on the client's loop: its socket is not read meanwhile

    quick = Backoff(base=0.05, cap=1.0)
    try:
        with (
            make(gw, gw_id, "a") as a,
            make(gw, gw_id, "b", transport="websocket", backoff=quick) as b,
        ):
            b.sync()
            b.watch("todos", stall)
            wait_for(lambda: sockets() == 1)
            batches = 0
            while sockets() == 1:
                assert batches < 30, "the stalled client was never dropped"
                for i in range(100):
                    a.insert("todos", f"r{batches}-{i}", {"title": "y" * 8000})
                a.sync()
                batches += 1
            assert stuck.is_set()
            # Dropped for its full send queue (4408), not by the keepalive (1011, after 20 s).
            assert "too slow for its broadcasts" in gw.log_path.read_text()
            release.set()
            wait_for(lambda: len(replica(b)) == 100 * batches, timeout=60)
            assert replica(b) == replica(a) == gateway_state(gw, gw_id)
            wait_for(lambda: sockets() == 1)  # connected again
    finally:
        release.set()
        gw.stop()


# -- convergence property ----------------------------------------------------------------------

CLIENTS = ("c0", "c1", "c2")
WRITE = st.tuples(
    st.just("write"),
    st.sampled_from(CLIENTS),
    st.sampled_from(["r0", "r1", "r2", "r3"]),
    st.sampled_from(["upsert", "upsert", "delete"]),
    st.dictionaries(st.sampled_from(["title", "done", "prio"]), st.integers(0, 3), max_size=3),
)
OTHER = st.tuples(st.sampled_from(["sync", "sync", "restart", "offline"]), st.sampled_from(CLIENTS))
STEP = st.one_of(WRITE, WRITE, OTHER)


def _value(col: str, v: int) -> Any:
    return {"title": f"t{v}", "done": v % 2 == 0, "prio": v}[col]


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, min_size=10, max_size=40))
def test_three_clients_converge_to_the_gateway_state(
    gateway: ServerProcess, tmp_path: Path, steps: list[tuple[Any, ...]]
) -> None:
    import uuid

    gw_id = f"gwprop{uuid.uuid4().hex[:10]}"
    base = tmp_path / gw_id
    base.mkdir()
    transports = {"c0": "http", "c1": "websocket", "c2": "http"}
    open_clients = {
        cid: make(gateway, gw_id, cid, base / f"{cid}.db", transport=transports[cid])
        for cid in CLIENTS
    }
    offline: set[str] = set()
    try:
        for step in steps:
            kind, cid = step[0], step[1]
            c = open_clients[cid]
            if kind == "write":
                _, _, row, op, cols = step
                live = c.get("todos", row) is not None
                if op == "delete" and live:
                    c.delete("todos", row)
                elif op == "upsert":
                    c.upsert("todos", row, {k: _value(k, v) for k, v in cols.items()})
            elif kind == "sync" and cid not in offline:
                c.sync()
            elif kind == "restart":
                c.close()
                open_clients[cid] = make(
                    gateway, gw_id, cid, base / f"{cid}.db", transport=transports[cid]
                )
            elif kind == "offline":
                offline ^= {cid}
        for _ in range(2):
            for c in open_clients.values():
                c.sync()
        expected = gateway_state(gateway, gw_id)
        for c in open_clients.values():
            assert replica(c) == expected
    finally:
        for c in open_clients.values():
            c.close()


def test_documented_quickstart_runs_as_shown_against_lakesync_init(tmp_path: Path) -> None:
    """The quickstart's shell lines (``lakesync init``, ``.env``, ``lakesync up``, a token) and
    its Python snippet, as every page shows them, against a real gateway process."""
    import os

    from lakesync.lakehouse.process_env import free_loopback_port

    root = Path(__file__).parents[2]
    shell, snippet = documented_quickstart()
    lines = [ln for ln in snippet.splitlines() if ln.strip()]
    assert len([ln for ln in lines if not ln.startswith(("import ", "from "))]) <= 10
    # Only the port differs: the test gateway listens on a free one instead of 8787.
    port = free_loopback_port()
    assert "lakesync up &" in shell and "http://127.0.0.1:8787" in snippet
    shell = shell.replace(
        "lakesync up &", f"lakesync up --port {port} >up.log 2>&1 &\necho $! >up.pid"
    )
    url = f"http://127.0.0.1:{port}"
    wait = (
        "import httpx, sys, time\n"
        "deadline = time.monotonic() + 90\n"
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        f"        if httpx.get('{url}/health', timeout=1).status_code == 200: sys.exit(0)\n"
        "    except httpx.HTTPError: pass\n"
        "    time.sleep(0.2)\n"
        "sys.exit('the gateway did not answer')\n"
    )
    script = (
        f"set -e\n{shell}\n"
        f'"{sys.executable}" -c "$WAIT"\n'
        f'"{sys.executable}" -c "$SNIPPET"\n'
        f'"{sys.executable}" -c "$SNIPPET"\n'  # again: it must also run against its own state
    )
    env = {**os.environ, "PYTHONPATH": str(root), "WAIT": wait}
    env["SNIPPET"] = snippet.replace("http://127.0.0.1:8787", url)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for name in ("LAKESYNC_CONFIG", "LAKESYNC_JWT_SECRET", "LAKESYNC_DATA_DIR", "LAKESYNC_TOKEN"):
        env.pop(name, None)
    try:
        out = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=180, check=False,
        )
    finally:
        pid_file = tmp_path / "up.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60)
    log = (tmp_path / "up.log").read_text() if (tmp_path / "up.log").exists() else ""
    assert out.returncode == 0, out.stderr + log
    row = "[{'row_id': 'row-1', 'title': 'Buy milk', 'done': True, 'owner': 'alice'}]"
    assert out.stdout.splitlines()[-2:] == [row, row], out.stderr
    assert "refused" not in out.stderr


def test_async_client_round_trip(gateway: ServerProcess, gw_id: str) -> None:
    import asyncio

    from lakesync.client import AsyncLakeSyncClient

    async def main() -> list[dict[str, Any]]:
        kw: dict[str, Any] = {"url": gateway.url, "gateway_id": gw_id, "schemas": [TODOS]}
        tx, ty = gateway.token("x", gw_id), gateway.token("y", gw_id)
        async with (
            AsyncLakeSyncClient(":memory:", token=tx, **kw) as a,
            AsyncLakeSyncClient(":memory:", token=ty, transport="websocket", **kw) as b,
        ):
            await b.sync()
            watch = b.watch_query("select row_id, title from todos")
            rows = aiter(watch)
            assert await anext(rows) == []
            await a.insert("todos", "r", {"title": "async"})
            await a.sync()
            got = await asyncio.wait_for(anext(rows), 10)
            watch.cancel()
            assert a.queue_depth == 0 and a.status.state == "idle"
            return got

    assert asyncio.run(main()) == [{"row_id": "r", "title": "async"}]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_lost_push_ack_is_retried_without_duplicates(
    gateway: ServerProcess, gw_id: str, transport: TransportName
) -> None:
    from client_tcp_proxy import FlakyProxy

    from lakesync.client.errors import ConnectionFailedError

    proxy = FlakyProxy(gateway.port)
    try:
        with LakeSyncClient(
            ":memory:",
            url=proxy.url,
            gateway_id=gw_id,
            token=gateway.token("a", gw_id),
            schemas=[TODOS],
            transport=transport,
        ) as a:
            a.sync()  # connection (and WebSocket handshake) established
            for i in range(3):
                a.insert("todos", f"r{i}", {"title": str(i)})
            # The gateway stores the batch, but its acknowledgement never reaches the client.
            if transport == "http":
                proxy.trigger = b"/push HTTP/1.1"
            else:
                proxy.arm()
            with pytest.raises(ConnectionFailedError):
                a.engine.push()
            assert proxy.cuts == 1 and a.queue_depth == 3
            assert len(all_deltas(gateway, gw_id)) == 3  # stored although unacknowledged
            proxy.trigger = None
            a.sync()
            assert a.queue_depth == 0
        deltas = all_deltas(gateway, gw_id)
        assert sorted(d.row_id for d in deltas) == ["r0", "r1", "r2"]
    finally:
        proxy.close()


OWNER_RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["tasks"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
            "handover": True,  # a client may give its rows away
        }
    ],
}
TASKS = {
    "table": "tasks",
    "columns": [{"name": "owner", "type": "string"}, {"name": "n", "type": "number"}],
}


def _set_owner_rules(gateway: ServerProcess, gw_id: str) -> None:
    import httpx

    admin = gateway.token("admin", gw_id, role="admin")
    resp = httpx.post(
        f"{gateway.url}/v1/admin/sync-rules/{gw_id}",
        json=OWNER_RULES,
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sync_rules_filter_the_replica_and_rows_entering_the_view_arrive(
    gateway: ServerProcess, gw_id: str, transport: TransportName
) -> None:
    _set_owner_rules(gateway, gw_id)
    with (
        make(gateway, gw_id, "alice", schemas=[TASKS]) as alice,
        make(gateway, gw_id, "bob", schemas=[TASKS], transport=transport) as bob,
    ):
        alice.insert("tasks", "a1", {"owner": "alice", "n": 1})
        alice.insert("tasks", "b1", {"owner": "alice", "n": 2})
        alice.update("tasks", "b1", {"owner": "bob"})  # a hand-over: she may not create it his
        alice.sync()
        bob.sync()
        assert replica(bob, "tasks") == {("tasks", "b1"): {"owner": "bob", "n": 2}}
        alice.update("tasks", "a1", {"owner": "bob"})  # a1 enters bob's view
        alice.sync()
        bob.sync()
        assert set(replica(bob, "tasks")) == {("tasks", "a1"), ("tasks", "b1")}
        bob.update("tasks", "a1", {"n": 10})
        bob.sync()
        alice.sync()
        # Alice gave both rows away: her replica holds what the rules let her see, nothing.
        assert replica(alice, "tasks") == {}
        with make(gateway, gw_id, "bob", schemas=[TASKS]) as fresh_bob:
            fresh_bob.sync()
            assert (
                replica(fresh_bob, "tasks")
                == replica(bob, "tasks")
                == {
                    ("tasks", "a1"): {"owner": "bob", "n": 10},
                    ("tasks", "b1"): {"owner": "bob", "n": 2},
                }
            )


def test_a_write_the_rules_refuse_is_dead_lettered(gateway: ServerProcess, gw_id: str) -> None:
    """Row-level write access: bob may not create a row for alice (WITH CHECK). The gateway
    refuses it with 403; bob's client dead-letters that write alone, and alice never sees it."""
    _set_owner_rules(gateway, gw_id)
    with (
        make(gateway, gw_id, "alice", schemas=[TASKS]) as alice,
        make(gateway, gw_id, "bob", schemas=[TASKS]) as bob,
    ):
        bob.insert("tasks", "planted", {"owner": "alice", "n": 1})
        bob.insert("tasks", "b1", {"owner": "bob", "n": 2})
        bob.sync()
        [dead] = bob.dead_letters()
        assert dead.code == "FORBIDDEN" and dead.delta.row_id == "planted"
        assert replica(bob, "tasks") == {("tasks", "b1"): {"owner": "bob", "n": 2}}
        alice.sync()
        assert replica(alice, "tasks") == {}


def test_sync_rules_row_leaving_the_view_is_deleted_locally(
    gateway: ServerProcess, gw_id: str
) -> None:
    """Bob gives his row to alice: it leaves bob's replica and appears in alice's."""
    _set_owner_rules(gateway, gw_id)
    with (
        make(gateway, gw_id, "alice", schemas=[TASKS]) as alice,
        make(gateway, gw_id, "bob", schemas=[TASKS]) as bob,
    ):
        bob.insert("tasks", "b1", {"owner": "bob", "n": 2})
        bob.sync()
        alice.sync()
        assert replica(alice, "tasks") == {}
        bob.update("tasks", "b1", {"owner": "alice"})
        bob.sync()
        bob.sync()
        alice.sync()
        assert replica(bob, "tasks") == {}
        assert replica(alice, "tasks") == {("tasks", "b1"): {"owner": "alice", "n": 2}}
