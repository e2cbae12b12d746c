"""Acceptance: arbitrary JSON values through push → pull → client → landing → model.

Hypothesis pushes hostile values (huge and tiny numbers, -0, 1e-7, 2^53 ± 1, nesting at and around
the limit, long strings, unicode) to a real ``lakesync up`` over HTTP or WebSocket. Each push must
be refused (HTTP 400, or 413 over 1 MiB; WebSocket close 4400, or 1009 over 2 MiB; nothing stored)
exactly when the value rule says so, or carry the same value at every stage: the push reply, a
pull, the WebSocket broadcast, a Python client's replica, the gateway's own landing flush and the
decoders the dbt models use. "The same" is the canonical JSON JavaScript prints for the pushed
value, plus one Python form (the core's normal form) wherever Python holds it. The Spark models run
on a few examples only.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from inspect import signature
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from lakesync.canonical import canonical_json
from lakesync.cells import json_to_double, json_to_json_text, json_to_string
from lakesync.client import Event, LakeSyncClient
from lakesync.delta import delta_id
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.settings import LakeSettings
from lakesync.proto import lakesync_pb2 as pb
from lakesync.values import MAX_SAFE_MAGNITUDE, MAX_VALUE_DEPTH
from lakesync.wsframes import TAG_BROADCAST, TAG_PUSH
from tests.api.helpers import auth, now_hlc, token
from tests.gateway_process import ServerProcess

MIB = 1 << 20
# A connection kept open across examples (websockets >= 14 wants it asked for explicitly).
_DIRECT: dict[str, Any] = {"legacy": True} if "legacy" in signature(connect).parameters else {}
VALS = {
    "table": "vals",
    "columns": [
        {"name": "j", "type": "json"},
        {"name": "n", "type": "number"},
        {"name": "s", "type": "string"},
    ],
}
EDGE_NUMBERS: list[int | float] = [
    2**53 - 1,
    2**53,
    2**53 + 1,
    -(2**53) - 1,
    2**63,
    2**64 + 1,
    10**21,
    10**308,
    10**309,
    2**1024 - 2**971,
    2**1024 - 2**970,
    10**400,
    -(10**400),
    -0.0,
    0.0,
    1.0,
    0.1,
    1e-7,
    1e-6,
    5e-324,
    1e21,
    1e20,
    1.7976931348623157e308,
]
numbers = st.one_of(
    st.sampled_from(EDGE_NUMBERS),
    st.integers(),
    st.integers(-(2**1100), 2**1100),
    st.floats(allow_nan=False, allow_infinity=False),
)
strings = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", "é", "😀", "\u2028\u2029", "\x00nul", "\ufeff", "\U0001d518\U0001d52b"]),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "é", "😀"]), st.integers(1000, 20_000)),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "😀"]), st.just(400_000)),  # > 1 MiB
)
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def nested(draw: st.DrawFn) -> Any:
    """A value exactly ``depth`` arrays/objects deep, around the limit."""
    depth = draw(st.sampled_from([MAX_VALUE_DEPTH - 1, MAX_VALUE_DEPTH, MAX_VALUE_DEPTH + 1, 200]))
    value = draw(scalars.filter(lambda v: not isinstance(v, str) or len(v) < 100))
    for _ in range(depth):
        value = [value] if draw(st.booleans()) else {draw(st.text(max_size=2)): value}
    return value


hostile = st.one_of(values, nested())


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


def numbers_in(value: Any) -> Iterator[int | float]:
    if isinstance(value, dict | list):
        for v in value.values() if isinstance(value, dict) else value:
            yield from numbers_in(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def javascript_reads_infinity(n: int | float) -> bool:
    try:
        return math.isinf(float(n))
    except OverflowError:
        return True


def in_normal_form(value: Any) -> bool:
    """Every number an int exactly when it is integral with magnitude <= 2^53 (so no -0.0)."""
    return all(
        isinstance(n, int) == (float(n).is_integer() and abs(n) <= MAX_SAFE_MAGNITUDE)
        for n in numbers_in(value)
    )


def columns_for(value: Any) -> dict[str, Any]:
    cols = {"j": value}
    if isinstance(value, int | float) and not isinstance(value, bool):
        cols["n"] = value
    if isinstance(value, str):
        cols["s"] = value
    return cols


@dataclass
class Stack:
    """One gateway process and everyone around it, shared by all examples."""

    server: ServerProcess
    gw: str
    subscriber: ClientConnection
    client: LakeSyncClient
    events: list[Event] = field(default_factory=list)
    cursor: int = 0
    pusher: ClientConnection | None = None

    def ws_pusher(self) -> ClientConnection:
        if self.pusher is None:
            url = f"{self.server.ws_url}/v1/sync/{self.gw}/ws?token={token('alice', self.gw)}"
            self.pusher = connect(url, max_size=None, **_DIRECT)
        return self.pusher

    def settle(self) -> None:
        """Start an example from a clean slate, whatever the previous one left behind."""
        pull_since(self)
        for ws in (self.subscriber, self.pusher):
            with contextlib.suppress(TimeoutError, ConnectionClosed):
                while ws is not None:
                    ws.recv(timeout=0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data = tmp_path_factory.mktemp("values") / "data"
    with ServerProcess(data, env={"LAKESYNC_WS_RATE_LIMIT": "0"}) as server:
        gw = "vals_gw"
        r = httpx.post(
            f"{server.url}/v1/admin/schema/{gw}", json=VALS, headers=auth(token("ops", gw, "admin"))
        )
        assert r.status_code == 200, r.text
        sub_url = f"{server.ws_url}/v1/sync/{gw}/ws?token={token('bob', gw)}"
        with (
            connect(sub_url, max_size=None) as subscriber,
            LakeSyncClient(
                ":memory:", url=server.url, gateway_id=gw, token=token("carol", gw), schemas=[VALS]
            ) as client,
        ):
            s = Stack(server, gw, subscriber, client)
            client.on("*", s.events.append)
            time.sleep(0.2)  # the subscriber is registered before the first push
            yield s
            if s.pusher is not None:
                s.pusher.close()


@dataclass(frozen=True)
class Outcome:
    status: int  # HTTP status, or the WebSocket close code
    code: str | None
    echoed: dict[str, Any] | None  # the push reply's stored delta (HTTP only)


def http_body(row_id: str, cols: dict[str, Any], hlc: int, did: str) -> bytes:
    delta = {
        "op": "INSERT",
        "table": "vals",
        "rowId": row_id,
        "clientId": "alice",
        "columns": [{"column": c, "value": v} for c, v in cols.items()],
        "hlc": str(hlc),
        "deltaId": did,
    }
    return msgspec.json.encode({"clientId": "alice", "deltas": [delta]})


def ws_frame(row_id: str, cols: dict[str, Any], hlc: int, did: str) -> bytes:
    delta = pb.RowDelta(
        op=pb.INSERT,
        table="vals",
        row_id=row_id,
        client_id="alice",
        hlc=hlc,
        delta_id=did,
        columns=[pb.ColumnDelta(column=c, value=msgspec.json.encode(v)) for c, v in cols.items()],
    )
    return bytes([TAG_PUSH]) + pb.SyncPush(client_id="alice", deltas=[delta]).SerializeToString()


def push(stack: Stack, payload: bytes, over_ws: bool) -> Outcome:
    if not over_ws:
        r = httpx.post(
            f"{stack.server.url}/v1/sync/{stack.gw}/push",
            content=payload,
            headers={**auth(token("alice", stack.gw)), "Content-Type": "application/json"},
            timeout=60,
        )
        reply = r.json()
        if r.status_code != 200:
            assert set(reply) == {"error", "code", "requestId"}, reply
            return Outcome(r.status_code, reply["code"], None)
        return Outcome(200, None, reply["deltas"][0])
    ws = stack.ws_pusher()
    try:
        ws.send(payload)
        reply = ws.recv(timeout=30)
        while isinstance(reply, bytes) and reply[:1] == bytes([TAG_BROADCAST]):
            reply = ws.recv(timeout=30)  # others' pushes reach this connection too
    except ConnectionClosed:
        stack.pusher = None
        return Outcome(ws.close_code or 0, None, None)
    assert isinstance(reply, bytes)
    return Outcome(200, None, None)


def pull_since(stack: Stack) -> list[dict[str, Any]]:
    r = httpx.get(
        f"{stack.server.url}/v1/sync/{stack.gw}/pull",
        params={"since": str(stack.cursor), "clientId": "bob", "limit": "100"},
        headers=auth(token("bob", stack.gw)),
        timeout=60,
    )
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    stack.cursor = int(body["serverHlc"])
    assert not body["hasMore"]
    deltas: list[dict[str, Any]] = body["deltas"]
    return deltas


def broadcast_cells(stack: Stack) -> dict[str, Any]:
    frame = stack.subscriber.recv(timeout=30)
    assert isinstance(frame, bytes) and frame[0] == TAG_BROADCAST
    (d,) = pb.SyncResponse.FromString(frame[1:]).deltas
    return {c.column: msgspec.json.decode(c.value) for c in d.columns}


def cells(wire: dict[str, Any]) -> dict[str, Any]:
    return {c["column"]: c["value"] for c in wire["columns"]}


def check_one(stack: Stack, value: Any, over_ws: bool) -> tuple[str, Any] | None:
    """Push one value and check every online stage; returns ``(deltaId, value)`` if stored."""
    stack.settle()
    row_id = f"r{uuid.uuid4().hex[:12]}"
    cols = columns_for(value)
    hlc = now_hlc()
    wire_cols = [{"column": c, "value": v} for c, v in cols.items()]
    did = delta_id("alice", hlc, "vals", row_id, wire_cols)
    payload = (ws_frame if over_ws else http_body)(row_id, cols, hlc, did)
    too_deep = depth_of(value) > MAX_VALUE_DEPTH
    infinite = any(javascript_reads_infinity(n) for n in numbers_in(value))
    # HTTP bodies stop at 1 MiB (413); WebSocket messages at 2 MiB (close 1009, "too big").
    too_big = len(payload) > (2 * MIB if over_ws else MIB)
    refused = too_deep or infinite or too_big

    outcome = push(stack, payload, over_ws)
    if refused or outcome.status != 200:
        assert refused, f"refused a storable value: {outcome}"
        assert outcome.status != 200, "stored a value no replica can hold"
        if over_ws:
            assert outcome.status == (1009 if too_big else 4400), outcome
        else:
            assert outcome.status == (413 if too_big else 400), outcome
            assert outcome.code == "VALIDATION_ERROR", outcome
        assert pull_since(stack) == [], "a refused push left something behind"
        stack.client.sync(retries=0)
        return None

    expected = {c: canonical_json(v) for c, v in cols.items()}
    pulled = pull_since(stack)
    assert len(pulled) == 1 and pulled[0]["rowId"] == row_id
    assert pulled[0]["deltaId"] == did
    stages = {"pull": cells(pulled[0]), "broadcast": broadcast_cells(stack)}
    if outcome.echoed is not None:
        stages["echo"] = cells(outcome.echoed)
        assert outcome.echoed["deltaId"] == pulled[0]["deltaId"]
    for name, got in stages.items():
        assert {c: canonical_json(v) for c, v in got.items()} == expected, name
    held = stages["pull"]  # the Python form every Python replica must hold
    assert in_normal_form(held), held

    stack.client.sync(retries=0)
    row = stack.client.get("vals", row_id)
    assert row is not None
    assert repr(row.get("j")) == repr(held["j"])
    sql_row = stack.client.query("select n, s from vals where row_id = ?", [row_id])[0]
    if "n" in cols:
        assert float(sql_row["n"]) == float(held["n"])
    if "s" in cols:
        assert sql_row["s"] == held["s"]
    return pulled[0]["deltaId"], held


def landed_cells(settings: LakeSettings, gw: str) -> dict[str, dict[str, str]]:
    table = open_catalog(settings).load_table(LANDING_IDENTIFIER)
    rows = table.scan(selected_fields=("gateway_id", "delta_id", "cells")).to_arrow().to_pylist()
    return {
        r["delta_id"]: {c["column"]: c["value_json"] for c in r["cells"]}
        for r in rows
        if r["gateway_id"] == gw
    }


def flush_and_check_landing(stack: Stack, stored: list[tuple[str, Any]]) -> None:
    """The gateway's own flusher lands every stored value as served; the model decoders agree."""
    r = httpx.post(
        f"{stack.server.url}/v1/admin/flush/{stack.gw}",
        headers=auth(token("ops", stack.gw, "admin")),
        timeout=120,
    )
    assert r.status_code == 200 and r.json()["flushed"], r.text
    landed = landed_cells(LakeSettings.from_env(stack.server.data_dir, env={}), stack.gw)
    for did, held in stored:
        got = landed[did]
        assert got == {c: canonical_json(v) for c, v in held.items()}
        assert json_to_json_text(got["j"]) == (
            None if held["j"] is None else canonical_json(held["j"])
        )
        if "n" in held:
            assert json_to_double(got["n"]) == float(held["n"])
        if "s" in held:
            assert json_to_string(got["s"]) == held["s"]


@pytest.mark.slow
def test_every_stage_refuses_or_carries_the_same_value(stack: Stack) -> None:
    stored: list[tuple[str, Any]] = []
    refused = 0

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(value=hostile, over_ws=st.booleans())
    def one_push(value: Any, over_ws: bool) -> None:
        nonlocal refused
        result = check_one(stack, value, over_ws)
        if result is None:
            refused += 1
        else:
            stored.append(result)

    one_push()
    assert stored and refused, "the examples must include both storable and refused values"
    assert not [e for e in stack.events if e.kind in ("sync_error", "value_error")]
    flush_and_check_landing(stack, stored)


SPARK_EXAMPLES: list[Any] = [
    2**53 + 1,
    -0.0,
    1.0,
    1e21,
    1e-7,
    5e-324,
    2**64 + 1,
    -(2**53) - 1,
    "😀 é \u2028",
    "x" * 5000,
    [1.0, {"b": -0.0, "a": [2**60]}],
]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.dbt
def test_models_hold_what_every_replica_holds(tmp_path: Path) -> None:
    from lakesync.lakehouse.query import run_query
    from lakesync.lakehouse.runner import run_pipeline
    from lakesync.schema import parse_schema

    deep: Any = {"k": 1.5}
    for _ in range(MAX_VALUE_DEPTH - 1):
        deep = [deep]  # nested exactly at the limit
    examples = [*SPARK_EXAMPLES, deep]
    data = tmp_path / "data"
    with ServerProcess(data) as server:
        gw = "vals_spark"
        r = httpx.post(
            f"{server.url}/v1/admin/schema/{gw}", json=VALS, headers=auth(token("ops", gw, "admin"))
        )
        assert r.status_code == 200, r.text
        with (
            connect(f"{server.ws_url}/v1/sync/{gw}/ws?token={token('bob', gw)}") as sub,
            LakeSyncClient(
                ":memory:", url=server.url, gateway_id=gw, token=token("carol", gw), schemas=[VALS]
            ) as client,
        ):
            stack = Stack(server, gw, sub, client)
            time.sleep(0.2)
            stored = [check_one(stack, v, over_ws=False) for v in examples]
        assert all(s is not None for s in stored)
        flush_and_check_landing(stack, [s for s in stored if s is not None])
    settings_ = LakeSettings.from_env(data, env={})
    run_pipeline(settings=settings_, schemas=[parse_schema(VALS)])
    result = run_query(
        settings_, f"select row_id, j, n, s from analytics.vals where gateway_id = '{gw}'"
    )
    rows = {r[0]: r[1:] for r in result.rows}
    assert len(rows) == len(examples)
    by_json = {canonical_json(held["j"]): held for _, held in (s for s in stored if s is not None)}
    for j, n, s in rows.values():
        held = by_json[j]
        assert n == (float(held["n"]) if "n" in held else None)
        assert s == held.get("s")
