"""Sync-cycle logic against an in-process gateway stand-in: paging, retries, dead letters."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from client_gateway_double import GatewayDouble
from hypothesis import given, settings
from hypothesis import strategies as st

from client import Backoff, Event, LakeSyncClient
from client.errors import (
    AuthError,
    BackpressureError,
    ConnectionFailedError,
    RateLimitedError,
    SyncFailedError,
)
from client.transport import PullPage

SCHEMA = {
    "table": "t",
    "columns": [{"name": "a", "type": "string"}, {"name": "b", "type": "number"}],
}


def client(gw: GatewayDouble, cid: str, path: str = ":memory:", **kw: Any) -> LakeSyncClient:
    c = LakeSyncClient(
        path,
        gateway_id="gw",
        client_id=cid,
        schemas=[SCHEMA],
        transport=gw.connect(),
        backoff=Backoff(base=0.01, cap=0.05, max_retries=3),
        **kw,
    )
    return c


def replica(c: LakeSyncClient) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for r in c.query("select * from t"):
        rid = r.pop("row_id")
        out[("t", rid)] = {k: v for k, v in r.items() if v is not None}
    return out


def gateway_state(gw: GatewayDouble) -> dict[tuple[str, str], dict[str, Any]]:
    return {k: {c: v for c, v in row.items() if v is not None} for k, row in gw.state().items()}


def test_pull_honours_has_more_and_cursor_is_the_pull_reply() -> None:
    gw = GatewayDouble()
    a, b = client(gw, "a"), client(gw, "b", pull_limit=3)
    for i in range(10):
        a.insert("t", f"r{i}", {"a": str(i), "b": i})
    a.sync()
    cursor_after_push = a.status.cursor
    report = b.sync()
    assert report.pulled == 10
    assert replica(b) == replica(a) == gateway_state(gw)
    # The push reply's serverHlc must not move the cursor past deltas not yet pulled.
    assert cursor_after_push < gw.log[-1][0]
    a.sync()
    assert a.status.cursor == gw.log[-1][0]


def test_offline_edits_of_different_columns_both_survive() -> None:
    gw = GatewayDouble()
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


def test_push_bisects_a_rejected_batch_and_dead_letters_only_the_culprit() -> None:
    gw = GatewayDouble(rejects=lambda d: d.row_id == "bad")
    a = client(gw, "a")
    events: list[Event] = []
    a.on("dead_letter", events.append)
    for rid in ("r1", "r2", "bad", "r3", "r4"):
        a.insert("t", rid, {"a": rid})
    report = a.sync()
    assert (report.pushed, report.dead_lettered) == (4, 1)
    assert {d.row_id for _, d in gw.log} == {"r1", "r2", "r3", "r4"}
    assert a.queue_depth == 0
    [dead] = a.dead_letters()
    assert dead.delta.row_id == "bad" and dead.code == "SCHEMA_ERROR"
    assert [e.detail["row_id"] for e in events] == ["bad"]
    assert a.status.dead_letters == 1
    gw.rejects = lambda _d: False
    assert a.requeue_dead_letters() == 1
    a.sync()
    assert {d.row_id for _, d in gw.log} == {"r1", "r2", "r3", "r4", "bad"}


def test_transient_errors_are_retried_with_growing_backoff() -> None:
    gw = GatewayDouble()
    a = client(gw, "a")
    sleeps: list[float] = []
    a.engine._sleep = sleeps.append
    a.insert("t", "r", {"a": "x"})
    gw.failures = [
        ConnectionFailedError("down"),
        BackpressureError("busy"),
        RateLimitedError("slow", 2.5),
    ]
    a.sync()
    assert len(sleeps) == 3 and sleeps[2] >= 2.5
    assert sleeps[0] <= 0.01 and sleeps[0] >= 0.005
    assert [d.row_id for _, d in gw.log] == ["r"]


def test_retries_run_out_and_the_outbox_is_kept() -> None:
    gw = GatewayDouble()
    a = client(gw, "a")
    a.engine._sleep = lambda _s: None
    a.insert("t", "r", {"a": "x"})
    gw.failures = [ConnectionFailedError("down")] * 10
    errors: list[Event] = []
    a.on("sync_error", errors.append)
    with pytest.raises(SyncFailedError) as info:
        a.sync()
    assert isinstance(info.value.cause, ConnectionFailedError)
    assert len(errors) == 4 and a.queue_depth == 1
    assert a.status.state in ("offline", "error")


def test_auth_error_is_not_retried() -> None:
    gw = GatewayDouble()
    a = client(gw, "a")
    gw.failures = [AuthError("expired"), ConnectionFailedError("never reached")]
    with pytest.raises(AuthError):
        a.sync()
    assert len(gw.failures) == 1


def test_checkpoint_seeds_a_fresh_client_then_pull_continues() -> None:
    gw = GatewayDouble()
    a = client(gw, "a")
    for i in range(5):
        a.insert("t", f"r{i}", {"a": str(i)})
    a.sync()
    snapshot_hlc = gw.log[-1][0]
    gw.checkpoint = (snapshot_hlc, [[d for _, d in gw.log[:2]], [d for _, d in gw.log[2:]]])
    a.insert("t", "late", {"a": "after checkpoint"})
    a.sync()
    b = client(gw, "b")
    seen_pull_since: list[int] = []
    real_pull = b.engine.transport.pull

    def recording_pull(client_id: str, since: int, limit: int) -> PullPage:
        seen_pull_since.append(since)
        return real_pull(client_id, since, limit)

    b.engine.transport.pull = recording_pull  # type: ignore[method-assign]
    b.sync()
    assert seen_pull_since[0] == snapshot_hlc
    assert replica(b) == gateway_state(gw)


def test_realtime_broadcast_lands_in_replica_and_watch() -> None:
    gw = GatewayDouble()
    a, b = client(gw, "a"), client(gw, "b")
    got: list[str] = []
    b.watch("t", lambda changes: got.extend(f"{c.origin}:{c.row_id}" for c in changes))
    a.insert("t", "r", {"a": "live"})
    a.sync()
    assert got == ["realtime:r"]
    assert replica(b) == {("t", "r"): {"a": "live"}}
    assert b.status.cursor == 0  # broadcasts do not move the cursor


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from client import LakeSyncClient
    c = LakeSyncClient(sys.argv[1], client_id="crashy",
                       schemas=[{"table": "t", "columns": [{"name": "a", "type": "string"}]}])
    c.insert("t", "r", {"a": "before the crash"})
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_kill_9_before_push_then_reopen_pushes_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.db")
    proc = subprocess.run([sys.executable, "-c", CHILD, path], check=False, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    gw = GatewayDouble()
    c = client(gw, "crashy", path)
    assert c.queue_depth == 1
    assert c.query("select a from t") == [{"a": "before the crash"}]
    c.sync()
    c.sync()
    assert c.queue_depth == 0
    assert len(gw.pushes) == 1 and len(gw.log) == 1
    c.close()


def test_auto_sync_pushes_soon_after_a_write() -> None:
    import time

    gw = GatewayDouble()
    a = client(gw, "a")
    a.start_auto_sync(interval=30)
    try:
        a.insert("t", "r", {"a": "x"})
        deadline = time.monotonic() + 10
        while not gw.log and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [d.row_id for _, d in gw.log] == ["r"]
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
def test_random_writes_syncs_and_restarts_converge(steps: list[tuple[Any, ...]]) -> None:
    gw = GatewayDouble()
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
                    gw.connections.remove(c.engine.transport)  # gone, hears no broadcasts
                    c.close()
                    clients[i] = client(gw, f"c{i}", paths[i])
            for _ in range(2):
                for c in clients:
                    c.sync()
            expected = gateway_state(gw)
            assert [replica(c) for c in clients] == [expected] * 3
        finally:
            for c in clients:
                c.close()
