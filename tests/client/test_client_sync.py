"""Sync-cycle logic against the real gateway app in-process: paging, retries, dead letters.

Faults (an unreachable gateway, a busy or rate-limiting one, an expired token) are put in front of
the app by :mod:`client_inprocess_gateway`; everything else is the gateway's own behaviour.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from client_inprocess_gateway import InProcessGateway, fresh_gateway, running_gateway
from hypothesis import given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from lakesync.client import Backoff, Event, LakeSyncClient
from lakesync.client.errors import (
    AuthError,
    BackpressureError,
    ConnectionFailedError,
    RateLimitedError,
    SyncFailedError,
)
from lakesync.client.transport import Checkpoint, PullPage, PushResult, Transport
from lakesync.delta import RowDelta

SCHEMA: dict[str, Any] = {
    "table": "t",
    "columns": [{"name": "a", "type": "string"}, {"name": "b", "type": "number"}],
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient[Any]]:
    with running_gateway(tmp_path_factory.mktemp("gateway")) as http:
        yield http


@pytest.fixture
def gw(app: TestClient[Any]) -> InProcessGateway:
    return fresh_gateway(app)


def client(gw: InProcessGateway, cid: str, path: str = ":memory:", **kw: Any) -> LakeSyncClient:
    kw.setdefault("schemas", [SCHEMA])
    return LakeSyncClient(
        path,
        gateway_id=gw.gw_id,
        client_id=cid,
        transport=gw.connect(cid),
        backoff=Backoff(base=0.01, cap=0.05, max_retries=3),
        **kw,
    )


def replica(c: LakeSyncClient) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for r in c.query("select * from t"):
        rid = r.pop("row_id")
        out[("t", rid)] = {k: v for k, v in r.items() if v is not None}
    return out


def test_pull_honours_has_more_and_cursor_is_the_pull_reply(gw: InProcessGateway) -> None:
    a, b = client(gw, "a"), client(gw, "b", pull_limit=3)
    for i in range(10):
        a.insert("t", f"r{i}", {"a": str(i), "b": i})
    # The push reply's serverHlc must not move the cursor past deltas not yet pulled.
    assert a.engine.push() == (10, 0)
    assert a.status.cursor == 0
    report = b.sync()
    assert report.pulled == 10
    assert replica(b) == replica(a) == gw.state()
    _, head = gw.deltas()
    a.sync()
    assert a.status.cursor == head


def test_offline_edits_of_different_columns_both_survive(gw: InProcessGateway) -> None:
    a, b = client(gw, "a"), client(gw, "b")
    a.insert("t", "r", {"a": "x", "b": 1})
    a.sync()
    b.sync()
    a.update("t", "r", {"a": "from a"})
    b.update("t", "r", {"b": 2})
    b.sync()
    a.sync()
    b.sync()
    assert replica(a) == replica(b) == {("t", "r"): {"a": "from a", "b": 2}}


def test_push_bisects_a_rejected_batch_and_dead_letters_only_the_culprit(
    gw: InProcessGateway,
) -> None:
    # The gateway knows t without column c, so the one delta writing c is refused (422).
    gw.admin("schema", SCHEMA)
    wide = {**SCHEMA, "columns": [*SCHEMA["columns"], {"name": "c", "type": "string"}]}
    a = client(gw, "a", schemas=[wide])
    events: list[Event] = []
    a.on("dead_letter", events.append)
    for rid in ("r1", "r2", "bad", "r3", "r4"):
        a.insert("t", rid, {"a": rid, **({"c": "new"} if rid == "bad" else {})})
    report = a.sync()
    assert (report.pushed, report.dead_lettered) == (4, 1)
    assert {rid for _, rid in gw.state()} == {"r1", "r2", "r3", "r4"}
    assert a.queue_depth == 0
    [dead] = a.dead_letters()
    assert dead.delta.row_id == "bad" and dead.code == "SCHEMA_ERROR"
    assert [e.detail["row_id"] for e in events] == ["bad"]
    assert a.status.dead_letters == 1
    gw.admin("schema", wide)
    assert a.requeue_dead_letters() == 1
    a.sync()
    assert {rid for _, rid in gw.state()} == {"r1", "r2", "r3", "r4", "bad"}


def test_transient_errors_are_retried_with_growing_backoff(gw: InProcessGateway) -> None:
    a = client(gw, "a")
    sleeps: list[float] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    a.engine.driver._sleep = record
    a.insert("t", "r", {"a": "x"})
    gw.faults = [
        httpx.ConnectError("down"),
        BackpressureError("busy"),
        RateLimitedError("slow", 2.5),
    ]
    a.sync()
    assert len(sleeps) == 3 and sleeps[2] >= 2.5
    assert sleeps[0] <= 0.01 and sleeps[0] >= 0.005
    assert [d.row_id for d in gw.deltas()[0]] == ["r"]


def test_retries_run_out_and_the_outbox_is_kept(gw: InProcessGateway) -> None:
    a = client(gw, "a")
    a.engine.driver._sleep = _no_sleep
    a.insert("t", "r", {"a": "x"})
    gw.faults = [httpx.ConnectError("down") for _ in range(10)]
    errors: list[Event] = []
    a.on("sync_error", errors.append)
    with pytest.raises(SyncFailedError) as info:
        a.sync()
    assert isinstance(info.value.cause, ConnectionFailedError)
    assert len(errors) == 4 and a.queue_depth == 1
    assert a.status.state in ("offline", "error")


def test_auth_error_is_not_retried(gw: InProcessGateway) -> None:
    a = client(gw, "a")
    gw.faults = [AuthError("expired"), httpx.ConnectError("never reached")]
    with pytest.raises(AuthError):
        a.sync()
    assert len(gw.faults) == 1


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from lakesync.client import LakeSyncClient
    c = LakeSyncClient(sys.argv[1], client_id="crashy",
                       schemas=[{"table": "t", "columns": [{"name": "a", "type": "string"}]}])
    c.insert("t", "r", {"a": "before the crash"})
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_kill_9_before_push_then_reopen_pushes_exactly_once(
    tmp_path: Path, app: TestClient[Any]
) -> None:
    path = str(tmp_path / "crash.db")
    proc = subprocess.run([sys.executable, "-c", CHILD, path], check=False, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    gw = fresh_gateway(app)
    c = client(gw, "crashy", path)
    assert c.queue_depth == 1
    assert c.query("select a from t") == [{"a": "before the crash"}]
    c.sync()
    c.sync()
    assert c.queue_depth == 0
    assert gw.pushes() == 1 and len(gw.deltas()[0]) == 1
    c.close()


def test_auto_sync_pushes_soon_after_a_write(gw: InProcessGateway) -> None:
    a = client(gw, "a")
    a.start_auto_sync(interval=30)
    try:
        a.insert("t", "r", {"a": "x"})
        deadline = time.monotonic() + 10
        while not gw.deltas()[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [d.row_id for d in gw.deltas()[0]] == ["r"]
        assert a.status.auto_sync
    finally:
        a.stop_auto_sync()
    assert not a.status.auto_sync


def test_backoff_delays_are_bounded_and_jittered() -> None:
    b = Backoff(base=1, cap=8)
    assert b.delay(0, lambda: 0.0) == 0.5 and b.delay(0, lambda: 1.0) == 1.0
    assert b.delay(2, lambda: 0.0) == 2.0 and b.delay(10, lambda: 1.0) == 8.0


STEPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.integers(0, 2),
            st.sampled_from(["r0", "r1", "r2"]),
            st.booleans(),
            st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
        ),
        st.tuples(st.sampled_from(["sync", "restart"]), st.integers(0, 2)),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS)
def test_random_writes_syncs_and_restarts_converge(
    app: TestClient[Any], steps: list[tuple[Any, ...]]
) -> None:
    gw = fresh_gateway(app)
    with tempfile.TemporaryDirectory() as d:
        paths = [str(Path(d) / f"c{i}.db") for i in range(3)]
        clients = [client(gw, f"c{i}", paths[i]) for i in range(3)]
        try:
            for step in steps:
                i = step[1]
                c = clients[i]
                if step[0] == "write":
                    _, _, row, delete, cols = step
                    if delete and c.get("t", row) is not None:
                        c.delete("t", row)
                    elif not delete:
                        c.upsert(
                            "t", row, {k: (str(v) if k == "a" else v) for k, v in cols.items()}
                        )
                elif step[0] == "sync":
                    c.sync()
                else:
                    c.close()
                    clients[i] = client(gw, f"c{i}", paths[i])
            for _ in range(2):
                for c in clients:
                    c.sync()
            expected = gw.state()
            assert [replica(c) for c in clients] == [expected] * 3
        finally:
            for c in clients:
                c.close()


async def _no_sleep(_seconds: float) -> None:
    pass


class _OwnTransport(Transport):
    """A caller's own blocking transport (here delegating to the in-process gateway's)."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.closed = False

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushResult:
        self.calls.append("push")
        return self.inner.push(client_id, deltas, last_seen_hlc)

    def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        self.calls.append("pull")
        return self.inner.pull(client_id, since, limit)

    def checkpoint(self) -> Checkpoint | None:
        self.calls.append("checkpoint")
        return self.inner.checkpoint()

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def test_a_blocking_transport_of_the_callers_own_still_syncs(gw: InProcessGateway) -> None:
    own = _OwnTransport(gw.connect("a"))
    with LakeSyncClient(":memory:", gateway_id=gw.gw_id, client_id="a", schemas=[SCHEMA],
                        transport=own) as a:
        a.insert("t", "r", {"a": "x"})
        b = client(gw, "b")
        b.insert("t", "s", {"a": "y"})
        b.sync()
        report = a.sync()
        assert (report.pushed, report.pulled) == (1, 2)
        assert replica(a) == {("t", "r"): {"a": "x"}, ("t", "s"): {"a": "y"}}
        assert own.calls[:2] == ["checkpoint", "pull"] and "push" in own.calls
        b.close()
    assert own.closed
